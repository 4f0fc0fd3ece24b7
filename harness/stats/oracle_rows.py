"""Row scores from the oracle, and the comparisons of candidate rows against baseline rows.

Both engines' rows are scored by the same oracle; each row is reduced to a few numbers (the
sum over its tokens of an oracle-derived quantity), and candidate and baseline are compared
by the paired sign-flip test of :mod:`speceq.stats.comparison`. Under H0 the rows of both
engines are i.i.d. draws of one law, so these comparisons stay valid when the oracle is
slightly wrong (a numerics offset both engines share cancels), while a speculation bug, which
moves only the candidate, does not cancel.

The row scores (per token, summed over the row), chosen by measured power (docs: the
comparisons' power table) among bounded and unbounded candidates:

``argmax``
    1{x = argmax p} - max p: greedy leaks and too-low temperatures.
``log-likelihood``
    max(log p(x) - E_p log p, -LOGP_FLOOR): temperature drift. Winsorised at -10 nats so that
    a token the oracle calls impossible (log p = -inf, e.g. a bf16 nucleus-boundary token)
    keeps the score finite and one rare token cannot swamp the row; on the bundled target's
    laws (T = 0.7 and 1.0) it rejected as often as the unwinsorised score.
``PIT``
    the mid-distribution PIT F(x-) + p(x) / 2 - 1/2 (no random V): any monotone distortion
    of the law in descending-probability order (truncation leaks, temperature).
``draft ratio``
    min(q(x) / p(x), 10) - E_p[min(q / p, 10)]: drift toward the draft (needs the draft-ratio
    fields of the scores). Against a 10 % mixture with the draft (600 rows of 4 tokens, 100 runs)
    it rejected at 1e-3 in 0.47 / 0.35 of runs (T = 0.7 / 1.0) where q / (p + q) did in 0.28 / 0.21;
    caps of 2, 3, 5 did worse (0.20-0.41), 100 the same (0.49 / 0.34).
``draft log-ratio``
    clip(log q(x) - log p(x), -5, 5) - clip(E_p[log q - log p], -5, 5): the same direction on a
    log scale, which weighs the tokens the draft under-proposes (q < p) as much as those it
    over-proposes. The two draft scores catch different bugs (gallery, 20 repetitions, rate of
    p <= 1e-3): resample-from-target at 100 rows 0.70 (log-ratio) against 0.30 (ratio); the
    10 % mixture at 500 rows 0.40 (log-ratio) against 0.70 (ratio). So both are run.

Support: rows holding a token outside the oracle's processed support, compared exactly
(:func:`speceq.stats.comparison.support_comparison`).

The numerics margin (``margin_nats``, raw-logit nats; :mod:`speceq.stats.support_margin`). When
the engines declare different numerics (a bf16 candidate against a float32 baseline), their laws
differ a little where a processing cut (top-k, top-p) falls: the bf16 engine emits tokens just
past the float32 nucleus edge, which the float32 oracle gives probability 0. Such a *boundary
token* (probability 0, yet inside the support of some law within the margin:
:func:`speceq.stats.support_margin.boundary_tokens`) is evidence of the numerics, not of a bug.
So with a margin a row is flagged in the support comparison only for a token outside the
support by more than the margin, and every row score counts a boundary token as 0, the score's
expectation under the oracle's law (each score is centred), instead of the extreme value its
probability 0 gives it (the draft ratio's cap 10, the log-likelihood's floor -10). Both are
functions of a row alone, applied alike to both engines' rows, so every comparison stays exact
under H0. Margin 0 (the default) is the exact rule: every probability-0 token flags its row and
is scored as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from speceq.stats.blocked import RowBlocks, block_rows_by_prompt, blocked_comparison, row_blocks
from speceq.stats.comparison import (
    PERMUTATION_MAX_PAIRS,
    pair_rows_by_prompt,
    paired_comparison,
    permutation_comparison,
    row_sums,
    support_comparison,
)
from speceq.stats.results import ComparisonResult, SupportComparisonResult, _Result
from speceq.stats.scores import TokenScores
from speceq.stats.sequential import EProcessResult, paired_sign_eprocess
from speceq.stats.support_margin import boundary_tokens, outside_margin

#: Lower winsorising point of the log-likelihood score, in nats below E_p log p.
LOGP_FLOOR = 10.0
#: Clipping of the draft log-ratio score, nats.
LLR_CLIP = 5.0
#: The comparisons, in report order.
COMPARISONS = ("argmax", "log-likelihood", "PIT", "draft ratio", "draft log-ratio")


def _scores_iv(scores: object, n_rows: object, label: str) -> tuple[TokenScores, int]:
    if not isinstance(scores, TokenScores):
        raise TypeError(f"`{label}` must be a TokenScores, got {type(scores).__name__}")
    if isinstance(n_rows, bool) or not isinstance(n_rows, (int, np.integer)) or n_rows < 0:
        raise ValueError(f"the row count of `{label}` must be a non-negative integer, got {n_rows!r}")
    rows = np.asarray(scores.row)
    if rows.size and (rows.min() < 0 or rows.max() >= n_rows):
        raise ValueError(f"`{label}` scores rows outside [0, {n_rows}) (row count of its batch)")
    return scores, int(n_rows)


def _margin_iv(margin_nats: object) -> float:
    if isinstance(margin_nats, bool) or not isinstance(margin_nats, (int, float)) or not 0 <= margin_nats <= np.inf:
        raise ValueError(f"`margin_nats` must be a number of nats >= 0 (inf allowed), got {margin_nats!r}")
    return float(margin_nats)


def token_scores(scores: TokenScores, margin_nats: float = 0.0) -> dict[str, np.ndarray]:
    """Per-token values of every comparison the scores support (name -> float64 array).

    margin_nats > 0: the boundary tokens at that margin (module docstring) score 0 in every
    comparison; 0: every token is scored as it is.
    """
    s = scores
    neutral = boundary_tokens(s, _margin_iv(margin_nats))
    prob = np.asarray(s.prob, dtype=np.float64)
    width = prob if s.pit_mass is None else np.asarray(s.pit_mass, dtype=np.float64)
    out = {
        "argmax": np.asarray(s.is_argmax, dtype=np.float64) - np.asarray(s.argmax_prob, dtype=np.float64),
        "PIT": np.asarray(s.cdf_before, dtype=np.float64) + width / 2.0 - 0.5,
    }
    if s.logp_mean is not None:
        with np.errstate(invalid="ignore"):
            dev = np.asarray(s.logp, dtype=np.float64) - np.asarray(s.logp_mean, dtype=np.float64)
        out["log-likelihood"] = np.maximum(np.where(prob > 0, dev, -LOGP_FLOOR), -LOGP_FLOOR)
    if s.has_draft_ratio:
        out["draft ratio"] = np.asarray(s.draft_ratio, dtype=np.float64) - np.asarray(s.draft_ratio_mean, dtype=np.float64)
    if s.has_draft and s.draft_llr_mean is not None:
        with np.errstate(invalid="ignore"):
            llr = np.clip(np.nan_to_num(np.asarray(s.draft_llr, dtype=np.float64), nan=0.0), -LLR_CLIP, LLR_CLIP)
        out["draft log-ratio"] = llr - np.clip(np.asarray(s.draft_llr_mean, dtype=np.float64), -LLR_CLIP, LLR_CLIP)
    return {k: np.where(neutral, 0.0, out[k]) for k in COMPARISONS if k in out}


def row_scores(scores: TokenScores, n_rows: int, margin_nats: float = 0.0) -> dict[str, np.ndarray]:
    """Per-row sums of every token score (name -> ``[n_rows]``); rows without tokens score 0.

    margin_nats: as in :func:`token_scores` (boundary tokens score 0).
    """
    s, n = _scores_iv(scores, n_rows, "scores")
    return {k: row_sums(v, np.asarray(s.row), n) for k, v in token_scores(s, margin_nats).items()}


def impossible_rows(scores: TokenScores, n_rows: int, margin_nats: float = 0.0) -> np.ndarray:
    """Per row: does it hold a token outside the oracle's support? (bool ``[n_rows]``).

    margin_nats 0: a token of probability 0 under the oracle; > 0: a token outside the support of
    every law within the margin (:func:`speceq.stats.support_margin.outside_margin`; inf: a token
    of logit -inf). An oracle that cannot bound the support (no exclusion margins) falls back
    to probability 0.
    """
    s, n = _scores_iv(scores, n_rows, "scores")
    outside = outside_margin(s, _margin_iv(margin_nats))
    if outside is None:
        outside = np.asarray(s.prob) <= 0
    flags = np.zeros(n, dtype=bool)
    flags[np.asarray(s.row)[outside]] = True
    return flags


def boundary_rows(scores: TokenScores, n_rows: int, margin_nats: float) -> np.ndarray:
    """Per row: does it hold a boundary token at ``margin_nats`` (probability 0, inside the margin)?"""
    s, n = _scores_iv(scores, n_rows, "scores")
    flags = np.zeros(n, dtype=bool)
    flags[np.asarray(s.row)[boundary_tokens(s, _margin_iv(margin_nats))]] = True
    return flags


@dataclass(frozen=True, slots=True, kw_only=True)
class OracleComparisons(_Result):
    """The comparisons of one case: one sign-flip test per row score, and the support comparison.

    differences: per row score, the pair differences candidate - baseline the tests were built
    from (within each prompt, collection order): what :func:`speceq.stats.pooled_comparison`
    pools over the cases of a run; empty when the engines' row counts differ in some prompt, and then
    blocks holds, per row score, the rows in the blocks of :mod:`speceq.stats.blocked` (what
    :func:`speceq.stats.pooled_blocked_comparison` pools; empty with equal counts). margin_nats: the numerics margin the support flags and the
    scores were built with; baseline_boundary_rows / candidate_boundary_rows: rows holding a
    boundary token at that margin (scored 0, not flagged; both 0 at margin 0).
    """

    tests: tuple[ComparisonResult, ...]
    support: SupportComparisonResult
    differences: Mapping[str, np.ndarray] = field(default_factory=dict)
    blocks: Mapping[str, RowBlocks] = field(default_factory=dict)
    margin_nats: float = 0.0
    baseline_boundary_rows: int = 0
    candidate_boundary_rows: int = 0

    def summary(self) -> str:
        parts = "; ".join(f"{t.name} p={t.pvalue:.3g}" for t in self.tests)
        return f"oracle comparisons, candidate vs baseline: {parts}; support p={self.support.pvalue:.3g}"


def compare_oracle_scores(baseline: TokenScores, baseline_prompt: np.ndarray, candidate: TokenScores,
                          candidate_prompt: np.ndarray, *, rng: np.random.Generator | None = None,
                          level: float = 1e-3, margin_nats: float = 0.0) -> OracleComparisons:
    """Score both engines' rows and compare them: every row score present in both, and the support.

    baseline_prompt / candidate_prompt: the prompt index of every row of each batch (its length
    is the batch's row count); rows are paired within each prompt in collection order, and when the
    engines' row counts differ in a prompt the blocked test of :mod:`speceq.stats.blocked` (one row of
    the smaller engine with its share of the larger's) uses every row instead. With
    fewer than PERMUTATION_MAX_PAIRS pairs (and an ``rng``) the stratified permutation test
    replaces the paired sign-flip test, its Monte Carlo sized to ``level`` (the level the
    p-values are compared at). margin_nats: the engines' numerics margin (module docstring; 0: exact).
    """
    bp, cp = np.asarray(baseline_prompt), np.asarray(candidate_prompt)
    wb, wc = row_scores(baseline, bp.size, margin_nats), row_scores(candidate, cp.size, margin_nats)
    ib, ic = pair_rows_by_prompt(bp, cp)
    names = [k for k in COMPARISONS if k in wb and k in wc]
    paired = ib.size == bp.size == cp.size  # every prompt has as many rows of each engine
    blocks: dict[str, RowBlocks] = {}
    if rng is not None and ib.size < PERMUTATION_MAX_PAIRS:
        tests = tuple(permutation_comparison(wb[k], wc[k], name=f"{k} comparison", level=level, rng=rng,
                                             baseline_strata=bp, candidate_strata=cp) for k in names)
    elif paired:
        tests = tuple(paired_comparison(wb[k][ib], wc[k][ic], name=f"{k} comparison") for k in names)
    if not paired:  # unequal counts: every row in a block with one row of the smaller engine
        bb, bc, n_blocks = block_rows_by_prompt(bp, cp)
        blocks = {k: row_blocks(wb[k], bb, wc[k], bc, n_blocks) for k in names}
        if rng is None or ib.size >= PERMUTATION_MAX_PAIRS:
            tests = tuple(blocked_comparison(blocks[k], name=f"{k} comparison") for k in names)
    support = support_comparison(impossible_rows(baseline, bp.size, margin_nats),
                                 impossible_rows(candidate, cp.size, margin_nats),
                                 baseline_strata=bp, candidate_strata=cp)
    return OracleComparisons(tests=tests, support=support,
                             differences={k: wc[k][ic] - wb[k][ib] for k in names} if paired else {}, blocks=blocks,
                             margin_nats=float(margin_nats),
                             baseline_boundary_rows=int(boundary_rows(baseline, bp.size, margin_nats).sum()),
                             candidate_boundary_rows=int(boundary_rows(candidate, cp.size, margin_nats).sum()))


#: Name of the support comparison in sequential mode.
SUPPORT_NAME = "support comparison"


@dataclass(frozen=True, slots=True, kw_only=True)
class SequentialComparisons(_Result):
    """The comparison e-processes of one case at a look: one per row score, and the support one.

    crossing_rows: per e-process, the later row index (within its engine's batch) of the pair
    at which it first reached 1 / level (None: not crossed), so a driver can say at which
    sample count the evidence was enough.
    """

    tests: tuple[EProcessResult, ...]
    crossing_rows: tuple[int | None, ...]

    def summary(self) -> str:
        return "; ".join(t.summary() for t in self.tests)


def sequential_oracle_comparisons(baseline: TokenScores, baseline_prompt: np.ndarray, candidate: TokenScores,
                                  candidate_prompt: np.ndarray, *, level: float,
                                  margin_nats: float = 0.0) -> SequentialComparisons:
    """Paired sign e-processes of every row score and of the impossible-row flags, pairs in collection order.

    Valid at every look (the look schedule may depend on the data so far) whatever the oracle's
    error: under H0 the sign of each pair difference is a fair coin given the magnitudes.
    level: the share of alpha of each e-process (it rejects once E >= 1 / level). margin_nats:
    the engines' numerics margin, as in :func:`compare_oracle_scores`.
    """
    bp, cp = np.asarray(baseline_prompt), np.asarray(candidate_prompt)
    wb, wc = row_scores(baseline, bp.size, margin_nats), row_scores(candidate, cp.size, margin_nats)
    ib, ic = pair_rows_by_prompt(bp, cp)
    later = np.maximum(ib, ic)
    tests, rows = [], []

    def add(name: str, b: np.ndarray, c: np.ndarray) -> None:
        res = paired_sign_eprocess(b, c, name=name, level=level)
        tests.append(res)
        rows.append(None if res.first_crossing is None else int(later[res.first_crossing]))

    for k in COMPARISONS:
        if k in wb and k in wc:
            add(f"seq {k} comparison", wb[k][ib], wc[k][ic])
    add(f"seq {SUPPORT_NAME}", impossible_rows(baseline, bp.size, margin_nats)[ib].astype(np.float64),
        impossible_rows(candidate, cp.size, margin_nats)[ic].astype(np.float64))
    return SequentialComparisons(tests=tuple(tests), crossing_rows=tuple(rows))
