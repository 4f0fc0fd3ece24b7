"""Analysis glue: samples (+ oracle scores) of every case -> tests -> decisions -> RunResult.

The primary tests of a case are fixed by its settings before any data is seen:

black-box (always)
    ``chi2 prompt j position 0`` for every prompt j of the batch layout (the case's prompt
    and its companions), ``chi2 joint first 2`` on the case's prompt, and, unless
    ``ignore_eos``, ``chi2 length``. Without an oracle, ``chi2 prompt j position t`` for
    every later position t is primary too; with one, those are diagnostics.
oracle (when a target oracle is given): every row of BOTH engines, all prompts of the batch,
is scored by the same oracle, and the candidate is compared with the baseline
(:mod:`speceq.stats.oracle_rows`): ``argmax comparison``, ``log-likelihood comparison`` (when
the oracle knows the whole law), ``PIT comparison``, ``draft ratio comparison`` (when the
oracle has the draft) -- paired sign-flip tests of row scores, exact given the magnitudes --
and ``support comparison`` (rows holding a token of oracle probability 0, exact, one-sided).
Under H0 both engines' rows are i.i.d. draws of one law, so these stay valid when the
oracle's law is slightly off the engines' (bf16 numerics, a server's other graph): an offset
both engines share cancels, a speculation bug does not.

Row independence (every sampling case, both engines, all prompts of the batch): rows of one
``sample()`` call (the chunks' record, :func:`speceq.pipeline.plan.row_calls`; the forward batches
when all rows come from one call, :func:`row_groups`) must agree no more often than rows of two
calls (:func:`speceq.stats.row_independence`, exact). The candidate's test is primary (rows that
share randomness are not i.i.d. draws of the target law); the baseline's is a diagnostic that the
decision's reason cites, since every other test assumes independent rows.

Diagnostics (never deciding): the one-sample tests of each engine against the oracle (PIT
Anderson-Darling / KS / Cramér-von Mises / histogram, the martingale z-tests, the first-token
goodness of fit). They are valid only for an exact oracle; no gate can make them valid under
a shared mismatch (docs/explanation/statistics.md), so a note reads them side by side:
"both engines depart from the oracle by z = ..., the candidate no more than the baseline".

Effect size: for the case's prompt, the plug-in TV between baseline and candidate of the
token (or END) at every generated position; the case's TV is the largest over positions and
its upper bound is the largest per-position bound, each at level alpha / (positions), so the
bound holds for all positions at once (union bound). The reference is always the baseline
(two-sample), oracle or not.

Greedy cases (temperature 0) are not tested statistically: rows of every prompt of the
batch must be equal token for token; every diverging row's first divergence is classified
by the target's raw top-2 margin there (:mod:`speceq.pipeline.greedy`; the near-tie threshold is a
setting), and a candidate row that diverged at a near-tie is teacher-forced through the
oracle: every later token must be the target's argmax or a near-tie. The verdict of every
case, greedy or not, is decided in :func:`speceq.verdicts.decide.decide_run_pooled` from the typed
:class:`CaseEvidence` built here.

Run level: with two or more sampling cases scored by the oracle, every row-score comparison is
also pooled over the cases (:func:`pooled_tests`, every pair weighing the same, exact under "no
case shifted"); those tests join the one Holm family (weighted: together they hold
:data:`speceq.verdicts.decide.POOLED_ALPHA_SHARE` of it), and one rejecting makes the run
``shifted`` while each case keeps its own verdict.
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from speceq import stats
from speceq.core.defaults import NEAR_TIE_NATS, NUMERICS_TOLERANCE, SUPPORT_MARGIN_OFF
from speceq.engines.base import SampleBatch
from speceq.inputs.cases import Case
from speceq.models.tokenizer import VOCAB_SIZE as BYTE_VOCAB_SIZE
from speceq.oracles.protocol import Oracle
from speceq.pipeline.collect.session import ScoreRequest
from speceq.pipeline.greedy import compare_greedy_rows, first_divergence
from speceq.pipeline.pictures import chi2_bins, martingale_paths
from speceq.pipeline.plan import row_calls
from speceq.stats.results import Effect
from speceq.verdicts.decide import CaseDecision, decide_run_pooled, declare_lossy, first_step_levels, run_verdict
from speceq.verdicts.evidence import CaseEvidence, GreedyEvidence
from speceq.verdicts.failures import FailureKind, HardFailure
from speceq.verdicts.kinds import EffectName, TestKind, named_effect
from speceq.verdicts.notes import BOTH_ROLES, Note, NoteKind, offset_notes, sampling_time_note
from speceq.verdicts.reasons import TokenLabels, failure_lines, settings_rerun_command
from speceq.verdicts.result import (
    CaseResult,
    GreedyDivergence,
    GreedySummary,
    RunResult,
    SampleText,
    TestBins,
    TestOutcome,
    TokenFrequency,
)

#: Top tokens shown per position in the report, and positions shown.
TOP_TOKENS = 8
TOP_POSITIONS = (0, 1)
#: Decoded sample texts kept per engine.
SAMPLE_TEXTS = 3
#: Most greedy divergences displayed per case (all of them are classified and counted).
MAX_DIVERGENCES = 10
#: Oracle tests of a case (upper count) when planning the Monte Carlo level: five comparisons and the support one.
_ORACLE_PRIMARY_TESTS = 6
#: Sampling cases with an oracle needed before the row-score comparisons are also pooled over the run's cases.
POOLED_MIN_CASES = 2
#: The one-sample z diagnostics and the comparison each one is read against.
_Z_DIAGNOSTICS = ((TestKind.Z_ARGMAX_LEAK, stats.argmax_leak_z, "argmax comparison"),
                  (TestKind.Z_TEMPERATURE_DRIFT, stats.temperature_drift_z, "log-likelihood comparison"),
                  (TestKind.Z_DRAFT_RATIO, stats.draft_ratio_z, "draft ratio comparison"),
                  (TestKind.Z_DRAFT_DRIFT, stats.draft_drift_z, "draft log-ratio comparison"))
#: The normal quantile of the z-tests' two-sided EFFECT_LEVEL interval.
_Z_975 = 1.959963984540054


def case_rng(seed: int, case_id: str, stream: int) -> np.random.Generator:
    """Independent generator per (run seed, case, purpose): PIT V draws, Monte Carlo tables."""
    return np.random.default_rng([seed, zlib.crc32(case_id.encode()), stream])


@dataclass(frozen=True, slots=True)
class PositionComparison:
    """The chi-square of one generated position of the case's prompt, with its counts."""

    position: int
    result: stats.HomogeneityResult
    labels: np.ndarray
    counts_baseline: np.ndarray
    counts_candidate: np.ndarray


@dataclass(frozen=True, slots=True, kw_only=True)
class OracleFindings:
    """Oracle tests of one case: the comparisons (primary), the one-sample diagnostics, their reading."""

    tests: tuple[TestOutcome, ...]
    support_failures: tuple[HardFailure, ...]
    histogram: tuple[int, ...]
    notes: tuple[Note, ...] = ()
    z_paths: tuple[Any, ...] = ()
    test_bins: tuple[Any, ...] = ()
    pit_law: stats.PITLawBound | None = None
    differences: Mapping[str, np.ndarray | stats.RowBlocks] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseDetails:
    """What a case result shows besides the decision: speed, samples, frequencies, notes."""

    samples: tuple[SampleText, ...]
    candidate_tokens: int
    acceptance_rate: float | None
    baseline_tokens_per_s: float | None
    candidate_tokens_per_s: float | None
    notes: tuple[Note, ...] = ()
    top_tokens: tuple[TokenFrequency, ...] = ()
    pit_histogram: tuple[int, ...] = ()
    greedy: GreedySummary | None = None
    tv_reference: str = "two-sample"
    speedup_per_token: float | None = field(default=None)
    z_paths: tuple[Any, ...] = ()
    test_bins: tuple[Any, ...] = ()


#: Level of the effects' two-sided confidence intervals (a chi-square's TV keeps its own one-sided level).
EFFECT_LEVEL = 0.95


def _effect(res: Any) -> Effect | None:
    """The effect size of a test result with its confidence interval, or None (a uniformity statistic has none)."""
    if isinstance(res, (stats.HomogeneityResult, stats.GoodnessOfFitResult)):
        return named_effect(EffectName.TV, float(res.tv), low=0.0, high=float(res.tv_upper_bound),
                             level=1.0 - float(res.tv_alpha))
    if isinstance(res, stats.ComparisonResult):
        ci = res.confidence_interval(EFFECT_LEVEL)
        return named_effect(EffectName.ROW_SCORE_DIFFERENCE, float(res.mean_difference), low=ci.low, high=ci.high,
                             level=EFFECT_LEVEL)
    if isinstance(res, stats.PooledComparisonResult):
        ci = res.confidence_interval(EFFECT_LEVEL)
        return named_effect(EffectName.STANDARDISED_ROW_SCORE_DIFFERENCE, float(res.effect), low=ci.low,
                             high=ci.high, level=EFFECT_LEVEL)
    if isinstance(res, stats.IndependenceResult):
        ci = res.confidence_interval(EFFECT_LEVEL)
        return named_effect(EffectName.WITHIN_CALL_AGREEMENT_EXCESS, float(res.effect), low=ci.low, high=ci.high,
                             level=EFFECT_LEVEL)
    if isinstance(res, stats.SupportComparisonResult):
        ci = res.confidence_interval(EFFECT_LEVEL)
        return named_effect(EffectName.ROW_RATE_DIFFERENCE, float(res.effect), low=ci.low, high=ci.high,
                             level=EFFECT_LEVEL)
    if isinstance(res, stats.ZTestResult):
        half = None
        if res.summed_variance is not None and res.summed_variance > 0 and res.n > 0:
            half = float(_Z_975 * math.sqrt(res.summed_variance) / res.n)  # the martingale CLT's normal interval
        return named_effect(EffectName.PER_TOKEN_EXCESS, float(res.effect),
                             low=None if half is None else res.effect - half,
                             high=None if half is None else res.effect + half, level=None if half is None else EFFECT_LEVEL)
    return None


def _outcome(name: str, family: str, primary: bool, res: Any, kind: TestKind) -> TestOutcome:
    stat = float(res.statistic)
    effect = _effect(res)
    summary = res.summary(effect=False) if effect is not None and effect.name == "TV" else res.summary()
    return TestOutcome(
        name=name,
        family=family,
        primary=primary,
        statistic=stat if math.isfinite(stat) else float("inf"),
        pvalue=float(res.pvalue),
        dof=float(res.dof) if getattr(res, "dof", None) is not None else None,
        n=int(res.n) if getattr(res, "n", None) is not None else None,
        summary=summary,
        kind=kind,
        effect=effect,
    )


def _rows_of(batch: SampleBatch, prompt: int) -> tuple[np.ndarray, np.ndarray]:
    keep = np.asarray(batch.prompt_index) == prompt
    return batch.tokens[keep], batch.lengths[keep]


def _tokens_per_s(batch: SampleBatch) -> float | None:
    if not batch.wall_time_s:
        return None
    return float(batch.lengths.sum()) / batch.wall_time_s


def score_requests(cases: Sequence[Case], baseline: Mapping[str, SampleBatch],
                   candidate: Mapping[str, SampleBatch]) -> list[ScoreRequest]:
    """The ``oracle.score`` requests :func:`analyse_run` makes, in its order, so they can be scored ahead.

    Case by case (sampling cases only): every baseline row, then every candidate row (the
    comparisons score both engines with the same oracle).
    """
    out: list[ScoreRequest] = []
    for case in cases:
        if case.params.greedy:
            continue
        base, cand = baseline[case.case_id], candidate[case.case_id]
        out += [(case.case_id, case.prompts, base, case.params), (case.case_id, case.prompts, cand, case.params)]
    return out


def planned_pooled_tests(cases: Sequence[Case], *, oracle: bool) -> int:
    """Upper count of the run-level pooled comparisons: one per row score when two or more sampling cases have an oracle."""
    sampling = sum(not c.params.greedy for c in cases)
    return len(stats.COMPARISONS) if oracle and sampling >= POOLED_MIN_CASES else 0


def pooled_tests(differences: Sequence[Mapping[str, np.ndarray | stats.RowBlocks]]) -> tuple[TestOutcome, ...]:
    """The run-level primary tests: each row score's paired comparison pooled over the cases that have it.

    differences: per sampling case with an oracle, per row score its pair differences (``differences``
    of :func:`speceq.stats.compare_oracle_scores`) or, when the engines' row counts differ, its rows in
    blocks (``blocks``). A score is pooled over the cases that have it when they are at least
    POOLED_MIN_CASES (a single case's own test already counts): by the sign-flip test when every case
    is paired, else by the blocked test with each paired case's pairs as blocks of two.
    """
    out = []
    for k in stats.COMPARISONS:
        parts = [d[k] for d in differences if k in d]
        if len(parts) < POOLED_MIN_CASES:
            continue
        if all(isinstance(x, np.ndarray) for x in parts):
            res = stats.pooled_comparison(parts, name=f"pooled {k} comparison")
        else:
            res = stats.pooled_blocked_comparison(
                [x if isinstance(x, stats.RowBlocks) else stats.pair_blocks(x) for x in parts],
                name=f"pooled {k} comparison")
        out.append(_outcome(res.name, "pooled oracle comparison", True, res, TestKind.POOLED_COMPARISON))
    return tuple(out)


def planned_primary_tests(case: Case, *, oracle: bool) -> int:
    """Upper count of a case's primary tests, fixed by its settings before any data."""
    if case.params.greedy:
        return 0
    L = case.params.max_new_tokens
    count = len(case.prompts) * (1 if oracle else L) + 1  # + the candidate's row independence
    count += 1 if L >= 2 else 0  # joint first 2
    count += 1 if (not case.params.ignore_eos and L >= 2) else 0  # length
    return count + (_ORACLE_PRIMARY_TESTS if oracle else 0)


def _two_sample(case: Case, base: SampleBatch, cand: SampleBatch, *, oracle_mode: bool, alpha: float,
                mc_level: float, rng: np.random.Generator,
                tok: TokenLabels) -> tuple[list[TestOutcome], list[PositionComparison], list[Any]]:
    """Per-position chi-square tests (all prompts), joint and length tests; TV of the case prompt.

    Also the largest bins of every primary test with raw p <= alpha (one that may decide the
    case), for the report's picture of it.
    """
    L = case.params.max_new_tokens
    tests: list[TestOutcome] = []
    bins: list[Any] = []
    per_position: list[PositionComparison] = []  # case prompt only
    tv_alpha = alpha / L

    def chi2(ca: np.ndarray, cb: np.ndarray, **kw: Any) -> stats.HomogeneityResult:
        return stats.chisquare_homogeneity(ca, cb, rng=rng, mc_level=mc_level, **kw)

    for j in range(len(case.prompts)):
        ta, la = _rows_of(base, j)
        tb, lb = _rows_of(cand, j)
        if len(la) == 0 or len(lb) == 0:
            continue
        for t in range(L):
            sa, sb = stats.position_symbols(ta, la, t), stats.position_symbols(tb, lb, t)
            if t > 0 and (sa == stats.END).all() and (sb == stats.END).all():
                break
            labels, ca, cb = stats.paired_counts(sa, sb)
            res = chi2(ca, cb, tv_alpha=tv_alpha)
            primary = t == 0 or not oracle_mode
            tests.append(dataclasses.replace(_outcome(f"chi2 prompt {j} position {t}", "two-sample", primary, res, TestKind.CHI2_POSITION),
                                             prompt=j, position=t))
            if primary and res.pvalue <= alpha:
                bins.append(chi2_bins(tests[-1].name, [tok.token(int(x)) for x in labels], ca, cb,
                                      [(int(x),) for x in labels]))
            if j == 0:
                per_position.append(PositionComparison(t, res, labels, ca, cb))
    ta, la = _rows_of(base, 0)
    tb, lb = _rows_of(cand, 0)
    if L >= 2:
        labels, ca, cb = stats.paired_counts(stats.joint_symbols(ta, la, 2), stats.joint_symbols(tb, lb, 2))
        res = chi2(ca, cb)
        tests.append(_outcome("chi2 joint first 2", "two-sample", True, res, TestKind.CHI2_JOINT))
        if res.pvalue <= alpha:
            decoded = [tuple(int(x) for x in stats.decode_joint(int(c), 2)) for c in labels]
            pairs = [" ".join(tok.token(x) for x in d) for d in decoded]
            bins.append(chi2_bins("chi2 joint first 2", pairs, ca, cb, decoded))
    if not case.params.ignore_eos and L >= 2:
        labels, ca, cb = stats.paired_counts(la, lb)
        res = chi2(ca, cb)
        tests.append(_outcome("chi2 length", "sequence", True, res, TestKind.CHI2_LENGTH))
        if res.pvalue <= alpha:
            bins.append(chi2_bins("chi2 length", [f"{int(x)} tokens" for x in labels], ca, cb))
    return tests, per_position, bins


def _top_tokens(per_position: Sequence[PositionComparison], tok: TokenLabels,
                first_probs: np.ndarray | None) -> tuple[TokenFrequency, ...]:
    out = []
    for pc in per_position:
        if pc.position not in TOP_POSITIONS:
            continue
        order = np.argsort(-(pc.counts_baseline + pc.counts_candidate), kind="stable")[:TOP_TOKENS]
        for i in order:
            lab = int(pc.labels[i])
            prob = None
            if pc.position == 0 and first_probs is not None and lab >= 0:
                prob = float(first_probs[lab])
            out.append(TokenFrequency(position=pc.position, token=lab, text=tok.token(lab),
                                      baseline_count=int(pc.counts_baseline[i]),
                                      candidate_count=int(pc.counts_candidate[i]), oracle_prob=prob))
    return tuple(out)


def _prefix(case: Case, batch: SampleBatch, row: int, position: int) -> tuple[int, ...]:
    """The prompt's ids then the row's tokens before ``position``: what the token at ``position`` followed."""
    return tuple(int(i) for i in (*case.prompts[int(batch.prompt_index[row])], *batch.row_tokens(row)[:position]))


def _impossible_tokens(case: Case, batch: SampleBatch, scores: stats.TokenScores,
                       tok: TokenLabels, margin_nats: float = 0.0) -> list[HardFailure]:
    """Up to 5 tokens outside the oracle's support at ``margin_nats`` (0: of probability 0), with their prefixes."""
    outside = stats.outside_margin(scores, margin_nats)
    if outside is None:  # the oracle cannot bound the support: probability 0
        outside = np.asarray(scores.prob) <= 0
    out = []
    for idx in np.flatnonzero(outside)[:5]:
        r, t = int(scores.row[idx]), int(scores.position[idx])
        out.append(HardFailure(kind=FailureKind.ZERO_PROBABILITY, prompt=int(batch.prompt_index[r]), position=t,
                               token=int(scores.token[idx]), prefix=_prefix(case, batch, r, t),
                               vocab_size=tok.vocab_size, row=r))
    return out


def _outside(case: Case, batch: SampleBatch, scores: stats.TokenScores, mask: np.ndarray, tok: TokenLabels,
             limit: int, margin_nats: float) -> list[HardFailure]:
    out = []
    for idx in np.flatnonzero(mask)[:limit]:
        r, t = int(scores.row[idx]), int(scores.position[idx])
        out.append(HardFailure(kind=FailureKind.OUTSIDE_MARGIN, prompt=int(batch.prompt_index[r]), position=t,
                               token=int(scores.token[idx]), prefix=_prefix(case, batch, r, t),
                               vocab_size=tok.vocab_size, row=r,
                               margin_nats=float(np.asarray(scores.exclusion_margin)[idx]), threshold_nats=margin_nats))
    return out


def robust_support_failures(case: Case, base: SampleBatch, base_scores: stats.TokenScores, cand: SampleBatch,
                            scores: stats.TokenScores, tok: TokenLabels,
                            margin_nats: float) -> tuple[list[HardFailure], list[Note]]:
    """(hard failures, notes) of the one-sided support check with a numerics margin.

    A candidate token is a hard failure when every law whose raw logits are within
    ``margin_nats`` of the oracle's excludes it under the case's processing
    (:func:`speceq.stats.outside_margin`; 0: any token of oracle probability 0). Valid whatever
    the sample size as long as the engines' logits are within the margin: such a token then has
    probability 0 for a correct engine. So it is not applied when the baseline has one too (its
    numerics are further off, or it is broken), nor when the oracle cannot bound the support
    (top-K log-probabilities): the support comparison alone decides then, and a note says so.
    An infinite margin (the library's default) turns the hard failure off.
    """
    if margin_nats == float("inf"):
        return [], []
    cand_out = stats.outside_margin(scores, margin_nats)
    base_out = stats.outside_margin(base_scores, margin_nats)
    if cand_out is None or base_out is None:
        if np.any(np.asarray(scores.prob) <= 0):
            return [], [Note(kind=NoteKind.UNBOUNDED_SUPPORT)]
        return [], []
    if base_out.any():
        eg = _outside(case, base, base_scores, base_out, tok, 1, margin_nats)[0]
        return [], [Note(kind=NoteKind.BASELINE_OUTSIDE_MARGIN, values={"count": int(base_out.sum())}, example=eg)]
    if not cand_out.any():
        return [], []
    shown = _outside(case, cand, scores, cand_out, tok, 5, margin_nats)
    shown[0] = dataclasses.replace(shown[0], rows_flagged=int(np.unique(np.asarray(scores.row)[cand_out]).size),
                                   baseline_rows=base.rows)
    return shown, []


def look_support_failures(case: Case, base: SampleBatch, base_scores: stats.TokenScores, cand: SampleBatch,
                          scores: stats.TokenScores, *, vocab_size: int,
                          margin_nats: float) -> tuple[HardFailure, ...]:
    """The support hard failures of :func:`robust_support_failures` on every row so far (sequential looks), as
    records with token ids (worded by :func:`speceq.verdicts.reasons.failure_lines`).

    The check is the same at every look and needs no level: under the margin a correct engine
    never emits such a token, so looking often cannot raise its false-alarm rate.
    """
    failures, _ = robust_support_failures(case, base, base_scores, cand, scores, TokenLabels(vocab_size), margin_nats)
    return tuple(failures)


def declared_numerics(description: Mapping[str, Any]) -> tuple[str, str] | None:
    """(dtype, device) of the target model an engine samples from, as its ``describe()`` declares it.

    The built-in engines declare it under ``model`` (:func:`speceq.models.hf_utils.describe_model`), the
    transformers engines at the top level; None: the engine declares no dtype (a server, a function).
    """
    for src in (description.get("model"), description):
        if isinstance(src, Mapping) and isinstance(src.get("dtype"), str):
            return str(src["dtype"]), str(src.get("device") or "")
    return None


@dataclass(frozen=True, slots=True)
class NumericsMargin:
    """The numerics margin of the support comparison and the row scores of a run, and why.

    nats: 0 (the exact rule: every token of oracle probability 0 is support evidence) unless the
    engines declare different numerics (dtype or device of the target), then the run's support
    margin (:data:`speceq.core.defaults.SUPPORT_MARGIN_NATS_BY_WORLD`; inf: only tokens of logit
    -inf). An engine that declares none is taken to share the other's (the exact rule, as before).
    """

    nats: float = 0.0
    baseline: tuple[str, str] | None = None
    candidate: tuple[str, str] | None = None

    @staticmethod
    def of(engines: Mapping[str, Any], support_margin_nats: float) -> NumericsMargin:
        b, c = (declared_numerics(engines.get(r) or {}) for r in ("baseline", "candidate"))
        differ = b is not None and c is not None and b != c
        return NumericsMargin(nats=float(support_margin_nats) if differ else 0.0, baseline=b, candidate=c)


def boundary_note(found: stats.OracleComparisons, numerics: NumericsMargin) -> Note | None:
    """The boundary evidence of a case as a ``numerics boundary`` note (None: no boundary token at the run's margin)."""
    if not (found.candidate_boundary_rows or found.baseline_boundary_rows):
        return None
    sup = found.support
    declared = {}
    for role, n in (("baseline", numerics.baseline), ("candidate", numerics.candidate)):
        declared |= {f"{role}_dtype": None if n is None else n[0], f"{role}_device": None if n is None else n[1]}
    return Note(kind=NoteKind.NUMERICS_BOUNDARY, values={
        "candidate_rows": int(found.candidate_boundary_rows), "candidate_total": int(sup.candidate_rows),
        "baseline_rows": int(found.baseline_boundary_rows), "baseline_total": int(sup.baseline_rows),
        "margin_nats": float(numerics.nats), **declared})


def pit_law_note(bound: stats.PITLawBound) -> Note:
    """The PIT-law bound of a case as a ``PIT-law bound`` note: the bound, its worst position and level."""
    p = bound.positions[bound.worst_position]
    return Note(kind=NoteKind.PIT_LAW_BOUND, values={
        "bound": float(bound.bound), "position": int(p.position), "n": int(p.n), "rows": int(bound.rows),
        "statistic": float(p.statistic), "positions": len(bound.positions), "alpha": float(bound.alpha)})


def _oracle_tests(case: Case, base: SampleBatch, cand: SampleBatch, oracle: Oracle, rng: np.random.Generator,
                  tok: TokenLabels, first_probs: np.ndarray | None, *, alpha: float, mc_level: float,
                  support_margin_nats: float, numerics: NumericsMargin = NumericsMargin()) -> OracleFindings:
    """Both engines scored by the same oracle: the comparisons (primary), then the one-sample diagnostics.

    numerics: the margin of the support comparison and the row scores (boundary tokens inside it are
    numerics evidence: not flagged, scored 0; :mod:`speceq.stats.oracle_rows`).
    """
    params = case.params
    base_scores = oracle.score(case.prompts, base, params)
    scores = oracle.score(case.prompts, cand, params)
    found = stats.compare_oracle_scores(base_scores, np.asarray(base.prompt_index), scores, np.asarray(cand.prompt_index),
                                        rng=rng, level=mc_level, margin_nats=numerics.nats)
    tests = [_outcome(t.name, "oracle comparison", True, t, TestKind(t.name)) for t in found.tests]
    sup = found.support
    tests.append(_outcome("support comparison", "oracle comparison", True, sup, TestKind.SUPPORT_COMPARISON))
    failures, notes = robust_support_failures(case, base, base_scores, cand, scores, tok, support_margin_nats)
    boundary = boundary_note(found, numerics)
    if boundary is not None:
        notes.append(boundary)
    if not failures and sup.baseline_clean and sup.candidate_flagged and sup.pvalue <= mc_level:
        # impossible tokens only in the candidate, significantly more than chance at the first Holm step
        failures = _impossible_tokens(case, cand, scores, tok, numerics.nats)
        if failures:
            failures[0] = dataclasses.replace(failures[0], rows_flagged=sup.candidate_flagged,
                                              rows_total=sup.candidate_rows, baseline_rows=sup.baseline_rows,
                                              pvalue=float(sup.pvalue))
    pit_u = stats.randomized_pit(scores, rng)
    pit = stats.pit_uniformity(pit_u)
    base_pit = stats.pit_uniformity(stats.randomized_pit(base_scores, rng)).anderson_darling
    tests += [
        _outcome("PIT Anderson-Darling", "oracle", False, pit.anderson_darling, TestKind.PIT_UNIFORMITY),
        _outcome("PIT Kolmogorov-Smirnov", "oracle", False, pit.ks, TestKind.PIT_UNIFORMITY),
        _outcome("PIT Cramér-von Mises", "oracle", False, pit.cramervonmises, TestKind.PIT_UNIFORMITY),
        _outcome("PIT histogram chi2", "oracle", False, pit.histogram_chi2, TestKind.PIT_UNIFORMITY),
        _outcome("baseline vs oracle PIT Anderson-Darling", "oracle", False, base_pit, TestKind.PIT_UNIFORMITY),
    ]
    by_name = {t.name: t for t in tests}
    pairs = []  # (baseline, candidate, their comparison) per z diagnostic, read together in words below
    for kind, fn, comparison in _Z_DIAGNOSTICS:
        try:
            zc, zb = fn(scores), fn(base_scores)
        except ValueError:  # the oracle lacks the fields (top-K law, no draft): the test is not run
            continue
        name = kind.value
        pair = (_outcome(f"baseline {name}", "oracle", False, zb, kind), _outcome(name, "oracle", False, zc, kind))
        tests += [pair[1], pair[0]]
        pairs.append((*pair, by_name.get(comparison)))
    notes += offset_notes(pairs, alpha)
    if first_probs is not None:  # None: the oracle does not know the whole first-token law
        first = (scores.position == 0) & (np.asarray(cand.prompt_index)[scores.row] == 0)
        counts = np.bincount(scores.token[first], minlength=first_probs.size)
        # a diagnostic: its Monte Carlo p-value is sized to alpha, not to the Holm level of the primary tests
        gof = stats.chisquare_gof(counts, first_probs / first_probs.sum(), rng=rng, mc_level=alpha)
        tests.append(_outcome("chi2 GOF first token", "oracle", False, gof, TestKind.CHI2_FIRST_TOKEN_GOF))
    base_sup = stats.support_violations(base_scores)
    if base_sup.failed:
        notes.append(Note(kind=NoteKind.BASELINE_ZERO_PROBABILITY, values={"count": int(base_sup.statistic)},
                          example=_impossible_tokens(case, base, base_scores, tok)[0]))
    bins = ()
    if sup.pvalue <= alpha:  # the support comparison may decide: its counts are its picture
        flagged = ("rows with a token of oracle probability 0" if numerics.nats == 0 else
                   f"rows with a token outside the support by more than {numerics.nats:g} nats")
        bins = (TestBins(test="support comparison", labels=(flagged, "rows without"),
                         baseline_counts=(sup.baseline_flagged, sup.baseline_rows - sup.baseline_flagged),
                         candidate_counts=(sup.candidate_flagged, sup.candidate_rows - sup.candidate_flagged),
                         n_baseline=sup.baseline_rows, n_candidate=sup.candidate_rows),)
    # the coarser certificate a large vocabulary affords: the candidate's PIT law against the oracle's, case prompt
    own = np.asarray(cand.prompt_index)[scores.row] == 0  # the case's prompt, as the TV bound
    rows = int((np.asarray(cand.prompt_index) == 0).sum())
    pit_law = None if rows == 0 else stats.pit_law_bound(
        pit_u[own], scores.position[own], rows=rows, positions=params.max_new_tokens, alpha=alpha)
    return OracleFindings(tests=tuple(tests), support_failures=tuple(failures), notes=tuple(notes),
                          histogram=tuple(int(h) for h in pit.histogram), z_paths=tuple(martingale_paths(scores)),
                          test_bins=bins, pit_law=pit_law, differences={**found.differences, **found.blocks})


def _diverging_candidate_rows(case: Case, base: SampleBatch, cand: SampleBatch
                              ) -> tuple[np.ndarray, np.ndarray, list[tuple]]:
    """Candidate rows that differ from the baseline's row of the same pair (all prompts), where they first do, and
    each one's first-divergence key (prompt, position, baseline token, candidate token, prefix)."""
    out: list[tuple[int, int, tuple]] = []
    for j in range(len(case.prompts)):
        ia, ib = np.flatnonzero(np.asarray(base.prompt_index) == j), np.flatnonzero(np.asarray(cand.prompt_index) == j)
        for ra, rb in zip(ia, ib):
            d = first_divergence(base.tokens[ra, : base.lengths[ra]], cand.tokens[rb, : cand.lengths[rb]])
            if d is not None:
                out.append((int(rb), d.position, (j, d.position, d.baseline_token, d.candidate_token, d.prefix)))
    out.sort(key=lambda x: x[0])
    return (np.array([r for r, _, _ in out], dtype=np.int64), np.array([t for _, t, _ in out], dtype=np.int64),
            [k for _, _, k in out])


def _teacher_forced(case: Case, cand: SampleBatch, rows: np.ndarray, diverged_at: np.ndarray, oracle: Oracle,
                    tok: TokenLabels, near_tie_nats: float) -> tuple[np.ndarray, list[HardFailure]]:
    """Score the diverging candidate rows through the oracle: after the divergence, every token must be the
    target's argmax or a near-tie.

    Returns (the candidate rows off the argmax path, up to MAX_DIVERGENCES of their tokens off it). A row
    that left the baseline's at a near-tie continues on its own prefix, where the baseline's
    row no longer says anything; the oracle still does. Tokens up to the divergence are the
    baseline's too (the divergence itself is classified by its margin).
    """
    if rows.size == 0:
        return rows, []
    sub = SampleBatch(tokens=cand.tokens[rows], lengths=cand.lengths[rows], prompt_index=cand.prompt_index[rows])
    scores = oracle.score(case.prompts, sub, case.params)
    after = np.asarray(scores.position) > diverged_at[np.asarray(scores.row)]
    off = after & ~np.asarray(scores.is_argmax) & (np.asarray(scores.raw_top2_margin) > near_tie_nats)
    bad_rows = np.unique(np.asarray(scores.row)[off])
    found = []
    for idx in np.flatnonzero(off)[:MAX_DIVERGENCES]:
        r, t = int(scores.row[idx]), int(scores.position[idx])
        found.append(HardFailure(kind=FailureKind.OFF_ARGMAX, prompt=int(sub.prompt_index[r]), position=t,
                                 token=int(scores.token[idx]), prefix=_prefix(case, sub, r, t),
                                 vocab_size=tok.vocab_size, row=int(rows[r]),
                                 margin_nats=float(scores.raw_top2_margin[idx]), threshold_nats=near_tie_nats))
    return rows[bad_rows], found


def _greedy(case: Case, base: SampleBatch, cand: SampleBatch, oracle: Oracle | None, tok: TokenLabels, *, alpha: float,
            near_tie_nats: float) -> tuple[GreedyEvidence, GreedySummary, tuple[HardFailure, ...]]:
    """Row comparison over every prompt; every divergence classified; mismatches as hard failures.

    With an oracle every diverging candidate row is also teacher-forced (:func:`_teacher_forced`):
    a token off the target's argmax path that is no near-tie is a hard failure too.
    """
    rows = [(*_rows_of(base, j), *_rows_of(cand, j)) for j in range(len(case.prompts))]
    cmp = compare_greedy_rows(rows, case.prompts, None if oracle is None else oracle.raw_top2_margin, near_tie_nats)
    mismatches = [d for d in cmp.divergences if d.classification == "mismatch"]
    failures = [HardFailure(kind=FailureKind.GREEDY_MISMATCH, prompt=d.prompt_index, position=d.divergence.position,
                            token=d.divergence.candidate_token, baseline_token=d.divergence.baseline_token,
                            prefix=(*map(int, case.prompts[d.prompt_index]), *d.divergence.prefix),
                            vocab_size=tok.vocab_size, margin_nats=d.margin, threshold_nats=near_tie_nats, rows=d.rows)
                for d in mismatches[:MAX_DIVERGENCES]]
    if len(mismatches) > MAX_DIVERGENCES:
        failures[0] = dataclasses.replace(failures[0], total=len(mismatches))
    forced, off_path, beyond = 0, 0, cmp.rows_classified("mismatch")
    if oracle is not None:
        diverging, diverged_at, keys = _diverging_candidate_rows(case, base, cand)
        forced = int(diverging.size)
        off_rows, off = _teacher_forced(case, cand, diverging, diverged_at, oracle, tok, near_tie_nats)
        off_path = int(off_rows.size)
        failures += off
        # a row is beyond a near-tie when its first divergence is a mismatch or it leaves the argmax path later
        classes = {(c.prompt_index, c.divergence.position, c.divergence.baseline_token, c.divergence.candidate_token,
                    c.divergence.prefix): c.classification for c in cmp.divergences}
        off_set = set(off_rows.tolist())
        beyond = sum(1 for r, k in zip(diverging.tolist(), keys) if classes[k] == "mismatch" or r in off_set)
    n_case = max(1, cmp.case_rows)
    evidence = GreedyEvidence(
        rows_compared=cmp.rows_compared, rows_equal=cmp.rows_equal, mismatches=cmp.rows_classified("mismatch"),
        near_ties=cmp.rows_classified("near-tie"), unexplained=cmp.rows_classified("unexplained"),
        near_tie_nats=near_tie_nats, differ_rate=cmp.case_rows_diverging / n_case,
        tv_upper_bound=stats.tv_upper_bound_row_mismatch(cmp.case_rows_diverging, n_case, alpha),
        rows_teacher_forced=forced, rows_off_argmax=off_path, case_rows=cmp.case_rows,
        case_rows_diverging=cmp.case_rows_diverging, rows_beyond_near_tie=beyond,
    )
    shown = tuple(
        GreedyDivergence(prompt_index=d.prompt_index, position=d.divergence.position,
                         baseline_token=d.divergence.baseline_token, candidate_token=d.divergence.candidate_token,
                         margin=d.margin, classification=d.classification, rows=d.rows,
                         prefix_ids=(*map(int, case.prompts[d.prompt_index]), *d.divergence.prefix),
                         prefix_text=tok.text(list(case.prompts[d.prompt_index]) + list(d.divergence.prefix))[-60:])
        for d in cmp.divergences[:MAX_DIVERGENCES]
    )
    summary = GreedySummary(rows_compared=cmp.rows_compared, rows_equal=cmp.rows_equal, near_tie_threshold=near_tie_nats,
                            divergences=shown, mismatches=evidence.mismatches, near_ties=evidence.near_ties,
                            unexplained=evidence.unexplained, distinct_divergences=len(cmp.divergences),
                            rows_beyond_near_tie=beyond)
    return evidence, summary, tuple(failures)


def _samples(case: Case, base: SampleBatch, cand: SampleBatch, tok: TokenLabels) -> tuple[SampleText, ...]:
    out = []
    for role, batch in (("baseline", base), ("candidate", cand)):
        rows = np.flatnonzero(np.asarray(batch.prompt_index) == 0)[:SAMPLE_TEXTS]
        for r in rows:
            ids = batch.row_tokens(int(r))
            out.append(SampleText(engine=role, prompt_index=0, text=tok.text(ids), token_ids=tuple(ids)))
    return tuple(out)


def row_groups(batch: SampleBatch, batch_size: int) -> np.ndarray:
    """Per row, the unit whose rows may share randomness: its ``sample()`` call (chunk) when the rows come from
    two or more calls, else its forward batch of ``batch_size`` rows within the one call (int64 ``[rows]``)."""
    calls = row_calls(batch)
    if np.unique(calls).size >= 2 or batch_size <= 1:
        return calls
    return np.arange(batch.rows, dtype=np.int64) // batch_size


def _independence(case: Case, base: SampleBatch, cand: SampleBatch) -> tuple[list[TestOutcome], list[Note]]:
    """Each engine's row-independence test (:func:`speceq.stats.row_independence`), all prompts of the batch.

    The candidate's is primary (rows that share randomness are not i.i.d. draws of the target law, whatever
    each row's law); the baseline's is a diagnostic that qualifies every other test (their p-values assume
    independent rows). A test with no pair to compare (one call of one batch) is a note, not an outcome.
    """
    tests: list[TestOutcome] = []
    notes: list[Note] = []
    for role, batch, primary in (("candidate", cand, True), ("baseline", base, False)):
        name = "row independence" if primary else "baseline row independence"
        res = stats.row_independence(batch.tokens, batch.lengths, row_groups(batch, case.batch_size),
                                     np.asarray(batch.prompt_index), name=name, level=EFFECT_LEVEL)
        if not res.tested:
            notes.append(Note(kind=NoteKind.INDEPENDENCE_UNTESTED, values={
                "role": role, "rows": res.rows, "calls": res.groups,
                "sample_calls": int(np.unique(row_calls(batch)).size), "batch_size": int(case.batch_size)}))
            continue
        tests.append(dataclasses.replace(_outcome(name, "row independence", primary, res, TestKind.ROW_INDEPENDENCE),
                                         position=res.position))
    if len(notes) == 2 and {**notes[0].values, "role": ""} == {**notes[1].values, "role": ""}:
        notes = [Note(kind=NoteKind.INDEPENDENCE_UNTESTED, values={**notes[0].values, "role": BOTH_ROLES})]
    return tests, notes


def grammar_failures(case: Case, batch: SampleBatch, tok: TokenLabels, oracle: Oracle | None,
                     limit: int = 5, eos_token_id: int | None = None) -> list[HardFailure]:
    """Up to ``limit`` rows of ``batch`` that leave the case's grammar (``structured_outputs``), each at its first
    token the grammar does not allow after the row's own earlier tokens; the first record carries the counts.

    A hard failure without statistics: a correct engine masks every token by the grammar, so no row of it
    ever leaves. The grammar's vocabulary and EOS are the oracle's (black-box: the tokenizer's vocabulary and
    ``eos_token_id``, the baseline engine's EOS, or else the tokenizer's own).
    """
    if case.params.structured_outputs is None:
        return []
    from speceq.models.grammar import Grammar, grammar_violation

    vocab = getattr(oracle, "vocab_size", None)
    eos = oracle.eos_token_id if oracle is not None and hasattr(oracle, "eos_token_id") else eos_token_id
    grammar = Grammar(case.params, vocab, eos)
    out: list[HardFailure] = []
    flagged = 0
    for r in range(batch.rows):
        row = batch.row_tokens(r)
        at = grammar_violation(grammar, row)
        if at is None:
            continue
        flagged += 1
        if len(out) < limit:
            out.append(HardFailure(kind=FailureKind.LEAVES_GRAMMAR, prompt=int(batch.prompt_index[r]), position=at,
                                   token=int(row[at]), prefix=_prefix(case, batch, r, at), vocab_size=tok.vocab_size,
                                   row=r))
    if out:
        out[0] = dataclasses.replace(out[0], rows_flagged=flagged, rows_total=batch.rows)
    return out


def _analyse_case(case: Case, base: SampleBatch, cand: SampleBatch, *, oracle: Oracle | None, alpha: float,
                  seed: int, tok: TokenLabels, mc_level: float, near_tie_nats: float, support_margin_nats: float,
                  numerics: NumericsMargin = NumericsMargin(), eos_token_id: int | None = None,
                  ) -> tuple[CaseEvidence, CaseDetails, Mapping[str, np.ndarray] | None]:
    """One case's evidence, what its result shows, and its pair differences per row score (None: no oracle scores)."""
    n_base = int((np.asarray(base.prompt_index) == 0).sum())
    n_cand = int((np.asarray(cand.prompt_index) == 0).sum())
    base_speed, cand_speed = _tokens_per_s(base), _tokens_per_s(cand)
    details = CaseDetails(
        samples=_samples(case, base, cand, tok), candidate_tokens=int(cand.lengths.sum()),
        acceptance_rate=cand.acceptance_rate, baseline_tokens_per_s=base_speed, candidate_tokens_per_s=cand_speed,
        speedup_per_token=cand_speed / base_speed if base_speed and cand_speed else None,
    )
    left = grammar_failures(case, cand, tok, oracle, eos_token_id=eos_token_id)
    if left and grammar_failures(case, base, tok, oracle, limit=1, eos_token_id=eos_token_id):  # the baseline leaves it too: not a finding
        left = []
    if case.params.greedy:
        g, summary, failures = _greedy(case, base, cand, oracle, tok, alpha=alpha, near_tie_nats=near_tie_nats)
        failures = (*left, *failures)
        # no TV estimate: the share of row pairs that differ estimates P(rows differ), which only bounds the TV
        ev = CaseEvidence(case_id=case.case_id, tests=(), tv_estimate=None, tv_upper_bound=g.tv_upper_bound,
                          effective_support=1.0, n_baseline=n_base, n_candidate=n_cand, hard_failures=failures, greedy=g)
        return ev, _replace(details, greedy=summary, tv_reference="greedy rows"), None

    rng = case_rng(seed, case.case_id, 0)
    tests, per_position, test_bins = _two_sample(case, base, cand, oracle_mode=oracle is not None, alpha=alpha,
                                                 mc_level=mc_level, rng=rng, tok=tok)
    details = _replace(details, test_bins=tuple(test_bins))
    failures: tuple[HardFailure, ...] = ()
    independence, notes = _independence(case, base, cand)
    tests += independence
    first_probs = None
    bounds = [(pc.result.tv, pc.result.tv_upper_bound) for pc in per_position]
    tv_reference = "two-sample"
    pit_law = None
    differences = None
    if oracle is not None:
        if oracle.knows_full_law(case.params):
            first_probs = oracle.next_token_probs([list(case.prompt_ids)], case.params)[0].astype(np.float64)
        else:
            notes.append(Note(kind=NoteKind.TOP_K_ORACLE))
        found = _oracle_tests(case, base, cand, oracle, case_rng(seed, case.case_id, 1), tok, first_probs,
                              alpha=alpha, mc_level=mc_level, support_margin_nats=support_margin_nats,
                              numerics=numerics)
        tests += found.tests
        failures = found.support_failures
        notes += found.notes
        pit_law = found.pit_law
        differences = found.differences
        if pit_law is not None:
            notes.append(pit_law_note(pit_law))
        details = _replace(details, pit_histogram=found.histogram, z_paths=found.z_paths,
                           test_bins=details.test_bins + found.test_bins)
    if bounds:
        worst = max(range(len(bounds)), key=lambda i: bounds[i][1])
        tv_est = max(b[0] for b in bounds)
        tv_up = bounds[worst][1]
        pc = per_position[worst]
        k_eff = stats.effective_support_upper(pc.counts_baseline + pc.counts_candidate)
    else:
        tv_est = tv_up = None
        k_eff = 1.0
    size = _size(case, base, cand, per_position, alpha, case_rng(seed, case.case_id, 2))
    failures = (*left, *failures)
    details = _replace(details, notes=tuple(notes), top_tokens=_top_tokens(per_position, tok, first_probs),
                       tv_reference=tv_reference)
    ev = CaseEvidence(case_id=case.case_id, tests=tuple(tests), tv_estimate=tv_est, tv_upper_bound=tv_up,
                      effective_support=k_eff, n_baseline=n_base, n_candidate=n_cand, hard_failures=failures,
                      bound_alpha=alpha / max(1, len(bounds)),
                      pit_law_upper_bound=None if pit_law is None else pit_law.bound,
                      pit_law_positions=0 if pit_law is None else len(pit_law.positions),
                      pooled_counts=None if not bounds else pc.counts_baseline + pc.counts_candidate,
                      vocabulary=None if oracle is None else oracle.vocab_size + 1, positions=max(1, len(bounds)),
                      size=size, independence_untested=tuple(n for n in notes
                                                             if n.kind is NoteKind.INDEPENDENCE_UNTESTED))
    return ev, details, differences


def _size(case: Case, base: SampleBatch, cand: SampleBatch, per_position: Sequence[PositionComparison], alpha: float,
          rng: np.random.Generator) -> stats.TVInterval | None:
    """The case's size: the largest TV over its prompt's per-position laws and the joint law of its first two tokens
    (what the chi-square tests compare), held-out estimate and bounds at 1 - alpha over all of them."""
    counts = [(pc.counts_baseline, pc.counts_candidate) for pc in per_position]
    if case.params.max_new_tokens >= 2:
        (ta, la), (tb, lb) = _rows_of(base, 0), _rows_of(cand, 0)
        _, ca, cb = stats.paired_counts(stats.joint_symbols(ta, la, 2), stats.joint_symbols(tb, lb, 2))
        counts.append((ca, cb))
    counts = [(a, b) for a, b in counts if a.sum() >= 2 and b.sum() >= 2]
    if not counts:
        return None
    return stats.max_tv_size([a for a, _ in counts], [b for _, b in counts], alpha=alpha, rng=rng)


def _replace(details: CaseDetails, **changes: Any) -> CaseDetails:
    return dataclasses.replace(details, **changes)


def analyse_run(
    cases: Sequence[Case],
    baseline: Mapping[str, SampleBatch],
    candidate: Mapping[str, SampleBatch],
    *,
    oracle: Oracle | None,
    alpha: float,
    tolerance: float,
    seed: int,
    engines: Mapping[str, Any],
    provenance: Mapping[str, Any],
    progress: bool = False,
    near_tie_nats: float = NEAR_TIE_NATS,
    certificate: str = "tv",
    support_margin_nats: float = SUPPORT_MARGIN_OFF,
    numerics_tolerance: float = NUMERICS_TOLERANCE,
) -> RunResult:
    """Analyse a run and decide every case.

    baseline / candidate: case id -> every row collected for that case (chunks concatenated
    in slice order; ``prompt_index`` says which prompt of ``case.prompts`` a row continues).
    ``oracle``: any :class:`speceq.oracles.protocol.Oracle`, or None for black-box mode.
    ``engines``: {"baseline": describe(), "candidate": describe()}. ``near_tie_nats``: the
    greedy near-tie threshold (top-2 margin, nats). ``support_margin_nats``: the numerics margin
    of the support hard failure (:func:`robust_support_failures`; 0: exact oracle), and, when the
    engines declare different numerics (:class:`NumericsMargin`), of the support comparison and the
    row scores too: a boundary token inside it is numerics evidence, not a hard failure. ``certificate``: what an ``equivalent`` verdict
    rests on (``"tv"`` or ``"pit-law"``, see :mod:`speceq.verdicts.decide`). ``numerics_tolerance``: the TV below
    which a detected difference is ``within-tolerance`` (0: off). Monte Carlo p-values are sized to
    the first Holm step of a case test (alpha / planned primary tests, or the cases' weighted share
    when pooled tests are planned: :func:`speceq.verdicts.decide.first_step_levels`).
    """
    tok = TokenLabels(oracle.vocab_size if oracle is not None else BYTE_VOCAB_SIZE)  # black-box: bytes when the ids fit
    numerics = NumericsMargin.of(engines, support_margin_nats)
    planned = sum(planned_primary_tests(c, oracle=oracle is not None) for c in cases)
    mc_level = first_step_levels(alpha, planned, planned_pooled_tests(cases, oracle=oracle is not None))[0]
    evidence: list[CaseEvidence] = []
    details: list[CaseDetails] = []
    differences: list[Mapping[str, np.ndarray | stats.RowBlocks]] = []
    iterator: Any = cases
    if progress:
        from rich.progress import track

        iterator = track(cases, description="analysing", transient=True)
    for case in iterator:
        ev, d, diff = _analyse_case(case, baseline[case.case_id], candidate[case.case_id], oracle=oracle, alpha=alpha,
                                    seed=seed, tok=_case_labels(tok, case), mc_level=mc_level, near_tie_nats=near_tie_nats,
                                    support_margin_nats=support_margin_nats, numerics=numerics,
                                    eos_token_id=(engines.get("baseline") or {}).get("eos_token_id"))
        evidence.append(ev)
        details.append(d)
        if diff is not None:
            differences.append(diff)
    decisions, pooled = decide_run_pooled(evidence, pooled_tests(differences), alpha=alpha, tolerance=tolerance,
                                          certificate=certificate, numerics_tolerance=numerics_tolerance)
    if (engines.get("candidate") or {}).get("lossless") is False:  # lossy by design: measured, not judged
        decisions, pooled = declare_lossy(evidence, decisions, pooled)
    settings = dict(provenance.get("settings") or {})
    results = tuple(_case_result(c, ev, dec, d, tolerance, settings, certificate)
                    for c, ev, dec, d in zip(cases, evidence, decisions, details))
    return RunResult(
        verdict=run_verdict(decisions, pooled), alpha=alpha, tolerance=tolerance, seed=seed, engines=dict(engines),
        cases=results, oracle=None if oracle is None else oracle.describe(), provenance=dict(provenance),
        pooled_tests=pooled.tests, pooled_reason=pooled.reason, certificate=certificate,
        numerics_tolerance=numerics_tolerance,
    )


def _case_labels(tok: TokenLabels | None, case: Case) -> TokenLabels | None:
    """The labels stored in a case's result: by the tokenizer its cases file names when this machine has it (the
    faces relabel from the stored ids anyway: :func:`speceq.verdicts.reasons.with_token_text`), else ``tok``."""
    if case.tokenizer is None or case.tokenizer == "bytes":
        return tok
    labels = TokenLabels(0 if tok is None else tok.vocab_size, case.tokenizer)
    return labels if labels.from_tokenizer else tok


def _case_result(case: Case, ev: CaseEvidence, d: CaseDecision, x: CaseDetails, tolerance: float,
                 settings: Mapping[str, Any], certificate: str = "tv") -> CaseResult:
    """Assemble the result of one case; the verdict and reason are the decision's, unchanged."""
    rerun = settings_rerun_command(settings, d.required_n, case) if d.required_n is not None else None
    if d.required_n is not None:
        estimate = sampling_time_note(d.required_n, ev.n_candidate, prompts=len(case.prompts),
                                          candidate_tokens=x.candidate_tokens,
                                          baseline_tokens_per_s=x.baseline_tokens_per_s,
                                          candidate_tokens_per_s=x.candidate_tokens_per_s)
        if estimate is not None:
            x = _replace(x, notes=(*x.notes, estimate))
    return CaseResult(
        case_id=case.case_id, case=case.to_dict(), verdict=d.verdict, reason=d.reason, tolerance=tolerance,
        n_baseline=ev.n_baseline, n_candidate=ev.n_candidate, tests=d.tests, tv_estimate=d.tv_estimate,
        tv_upper_bound=d.tv_upper_bound, tv_reference=x.tv_reference, required_n=d.required_n, rerun_command=rerun,
        min_detectable_tv=d.min_detectable_tv,
        candidate_tokens=x.candidate_tokens, acceptance_rate=x.acceptance_rate,
        baseline_tokens_per_s=x.baseline_tokens_per_s, candidate_tokens_per_s=x.candidate_tokens_per_s,
        speedup_per_token=x.speedup_per_token, top_tokens=x.top_tokens, pit_histogram=x.pit_histogram, greedy=x.greedy,
        samples=x.samples, hard_failures=failure_lines(ev.hard_failures, _case_labels(None, case)), failures=ev.hard_failures, notes=x.notes, z_paths=x.z_paths, test_bins=x.test_bins,
        certificate=certificate, pit_law_upper_bound=ev.pit_law_upper_bound, size=d.size,
    )
