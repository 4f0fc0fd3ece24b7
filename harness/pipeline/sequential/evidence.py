"""The sequential tests of one case on every sample collected so far (numpy; no I/O).

The tests are fixed by the case's settings before any data is seen (:func:`planned_tests`),
so the e-value Bonferroni split alpha / K over the K tests of the run is valid:

two-sample (always), each a paired exchangeability e-process of baseline vs candidate:
    ``seq pair prompt j position 0`` for every prompt j of the batch layout, ``seq pair
    joint first 2`` and, unless ``ignore_eos``, ``seq pair length``; without an oracle also
    ``seq pair prompt 0 position t`` for every later position t.
oracle (when an oracle scores the candidate's tokens, in collection order):
    ``seq argmax leak`` and ``seq temperature drift`` (betting e-processes on the
    martingale increments f(x_t) - E_p f), ``seq draft drift`` (normal mixture; when the
    oracle has the draft), ``seq PIT 16 bins`` (randomised PIT against the uniform law) and
    ``seq first token vs oracle`` (plug-in likelihood ratio against the exact first-token law).

Every observation of a test maps to the sample count (per engine) at which it was collected,
so a crossing says how many samples the test needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from speceq import stats
from speceq.engines.base import SampleBatch
from speceq.inputs.cases import Case
from speceq.stats import sequential as seq
from speceq.stats.scores import TokenScores

PIT_BINS = 16


def planned_tests(case: Case, *, oracle: bool, has_draft: bool) -> list[str]:
    """Names of the sequential tests of a (sampling) case, fixed before any data."""
    L = case.params.max_new_tokens
    names = [f"seq pair prompt {j} position 0" for j in range(len(case.prompts))]
    if L >= 2:
        names.append("seq pair joint first 2")
        if not case.params.ignore_eos:
            names.append("seq pair length")
    if not oracle:
        names += [f"seq pair prompt 0 position {t}" for t in range(1, L)]
    else:
        names += ["seq argmax leak", "seq temperature drift"]
        if has_draft:
            names.append("seq draft drift")
        names += [f"seq PIT {PIT_BINS} bins", "seq first token vs oracle"]
    return names


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseSequentialEvidence:
    """The sequential tests of one case after ``n`` samples per engine.

    tests: one EProcessResult per planned test; crossing_samples: per test, the sample count
    at which it first crossed its threshold (None: not crossed); bound: the time-uniform TV
    upper bound (None before the first grid point).
    """

    case_id: str
    n: int
    tests: tuple[seq.EProcessResult, ...]
    crossing_samples: tuple[int | None, ...]
    bound: seq.SequentialTVBound | None

    @property
    def first_crossing(self) -> tuple[str, int] | None:
        """(test name, samples) of the earliest crossing, or None."""
        hits = [(n, t.name) for t, n in zip(self.tests, self.crossing_samples) if n is not None]
        return (min(hits)[1], min(hits)[0]) if hits else None


def _rows(batch: SampleBatch, prompt: int) -> tuple[np.ndarray, np.ndarray]:
    keep = np.asarray(batch.prompt_index) == prompt
    return batch.tokens[keep], batch.lengths[keep]


def _pair(name: str, a: np.ndarray, b: np.ndarray, level: float) -> tuple[seq.EProcessResult, int | None]:
    res = seq.paired_exchangeability_eprocess(a, b, name=name, level=level)
    return res, None if res.first_crossing is None else res.first_crossing + 1


def _sample_of_token(scores: TokenScores, prompts: int) -> np.ndarray:
    return np.asarray(scores.row) // prompts + 1


def _oracle_tests(names: list[str], scores: TokenScores, first_probs: np.ndarray, cand: SampleBatch, prompts: int,
                  level: float, rng: np.random.Generator) -> list[tuple[seq.EProcessResult, int | None]]:
    order = np.lexsort((np.asarray(scores.position), np.asarray(scores.row)))
    s = scores.select(order)
    ok = np.asarray(s.prob) > 0  # p = 0 tokens are hard failures, reported separately
    s_ok = s.select(ok)
    at = _sample_of_token(s_ok, prompts)
    out = []

    def add(name: str, log_e: np.ndarray) -> None:
        res = seq.eprocess_result(name, log_e, level)
        out.append((res, None if res.first_crossing is None else int(at[res.first_crossing])))

    m = np.asarray(s_ok.argmax_prob, dtype=np.float64)
    add("seq argmax leak", seq.betting_log_e(np.asarray(s_ok.is_argmax, dtype=np.float64) - m, 1.0 - m, -m))
    d = np.asarray(s_ok.logp) - np.asarray(s_ok.logp_mean)
    add("seq temperature drift", seq.betting_log_e(d, -np.asarray(s_ok.logp_mean), None, np.asarray(s_ok.logp_var)))
    if "seq draft drift" in names:
        add("seq draft drift", seq.normal_mixture_log_e(np.asarray(s_ok.draft_llr) - np.asarray(s_ok.draft_llr_mean),
                                                       np.asarray(s_ok.draft_llr_var)))
    u = stats.randomized_pit(s_ok, rng)
    bins = np.minimum((u * PIT_BINS).astype(np.int64), PIT_BINS - 1)
    add(f"seq PIT {PIT_BINS} bins", seq.plugin_lr_log_e(bins, np.full(PIT_BINS, 1.0 / PIT_BINS)))
    first = (np.asarray(s.position) == 0) & (np.asarray(cand.prompt_index)[np.asarray(s.row)] == 0)
    tok = np.asarray(s.token)[first]
    p = first_probs / first_probs.sum()
    res = seq.plugin_lr_eprocess(tok, p, name="seq first token vs oracle", level=level)
    out.append((res, None if res.first_crossing is None else res.first_crossing + 1))
    return out


def case_tv_bound(case: Case, base: SampleBatch, cand: SampleBatch, n: int, alpha: float,
                  first_probs: np.ndarray | None) -> seq.SequentialTVBound | None:
    """The time-uniform TV upper bound of the case's prompt at n samples per engine.

    The largest per-position bound over the case's max_new_tokens positions, each at level
    alpha_k / max_new_tokens; position 0 against the oracle's exact law when one is given.
    """
    grid = seq.grid_point_at_most(n)
    if grid is None:
        return None
    k, g = grid
    L = case.params.max_new_tokens
    ta, la = _rows(base, 0)
    tb, lb = _rows(cand, 0)
    ta, la, tb, lb = ta[:g], la[:g], tb[:g], lb[:g]
    worst: seq.SequentialTVBound | None = None
    for t in range(L):
        sa, sb = stats.position_symbols(ta, la, t), stats.position_symbols(tb, lb, t)
        if t > 0 and (sa == stats.END).all() and (sb == stats.END).all():
            break
        if t == 0 and first_probs is not None:
            counts = np.bincount(sb[sb >= 0], minlength=first_probs.size)
            if counts.sum() == 0:
                continue
            tv = stats.tv_to_oracle(counts, first_probs / first_probs.sum())
            b = seq.sequential_tv_upper_bound(tv, n, k, g, alpha, positions=L, oracle=True)
        else:
            _, ca, cb = stats.paired_counts(sa, sb)
            b = seq.sequential_tv_upper_bound(stats.tv_distance(ca, cb), n, k, g, alpha, positions=L)
        if worst is None or b.upper > worst.upper:
            worst = b
    return worst


def evaluate_case(case: Case, base: SampleBatch, cand: SampleBatch, *, names: Sequence[str], level: float,
                  alpha: float, scores: TokenScores | None = None, first_probs: np.ndarray | None = None,
                  rng: np.random.Generator | None = None) -> CaseSequentialEvidence:
    """Every planned sequential test of ``case`` on all rows so far, and its TV bound.

    level: the share of alpha of each test (alpha / tests in the run); alpha: the case's
    level for the TV bound. ``scores``/``first_probs``: the oracle's scores of the
    candidate's rows (any order) and the exact first-token law, when an oracle is on.
    """
    names = list(names)
    P = len(case.prompts)
    results: list[tuple[seq.EProcessResult, int | None]] = []
    for j in range(P):
        ta, la = _rows(base, j)
        tb, lb = _rows(cand, j)
        results.append(_pair(f"seq pair prompt {j} position 0", stats.position_symbols(ta, la, 0),
                             stats.position_symbols(tb, lb, 0), level))
    ta, la = _rows(base, 0)
    tb, lb = _rows(cand, 0)
    if "seq pair joint first 2" in names:
        results.append(_pair("seq pair joint first 2", stats.joint_symbols(ta, la, 2), stats.joint_symbols(tb, lb, 2),
                             level))
    if "seq pair length" in names:
        results.append(_pair("seq pair length", la, lb, level))
    for t in range(1, case.params.max_new_tokens):
        name = f"seq pair prompt 0 position {t}"
        if name in names:
            results.append(_pair(name, stats.position_symbols(ta, la, t), stats.position_symbols(tb, lb, t), level))
    if scores is not None and first_probs is not None and len(scores):
        results += _oracle_tests(names, scores, first_probs, cand, P, level,
                                 rng if rng is not None else np.random.default_rng(0))
    got = [r.name for r, _ in results]
    if scores is not None and sorted(got) != sorted(names):
        raise ValueError(f"case {case.case_id!r}: evaluated tests {got} differ from the planned {names}")
    n = int(min(len(la), len(lb)))
    bound = case_tv_bound(case, base, cand, n, alpha, first_probs) if n else None
    return CaseSequentialEvidence(case_id=case.case_id, n=n, tests=tuple(r for r, _ in results),
                                  crossing_samples=tuple(c for _, c in results), bound=bound)
