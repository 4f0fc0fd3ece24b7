"""The sequential tests of one case on every sample collected so far (numpy; no I/O).

The tests are fixed by the case's settings before any data is seen (:func:`planned_tests`),
so the e-value Bonferroni split alpha / K over the K tests of the run is valid:

two-sample (always), each a paired exchangeability e-process of baseline vs candidate:
    ``seq pair prompt j position 0`` for every prompt j of the batch layout, ``seq pair
    joint first 2`` and, unless ``ignore_eos``, ``seq pair length``; without an oracle also
    ``seq pair prompt 0 position t`` for every later position t.
oracle (when an oracle scores both engines' rows, pairs in collection order): the paired sign
e-processes of the row-score comparisons, ``seq argmax comparison``, ``seq log-likelihood
comparison`` (when the oracle knows the whole law), ``seq PIT comparison``, ``seq draft ratio
comparison`` and ``seq draft log-ratio comparison`` (when the oracle has the draft), and ``seq support comparison`` (rows with a token
of oracle probability 0). Under H0 the sign of each pair's difference is a fair coin given the
magnitudes, so each is a test martingale at every look whatever the oracle's error
(:func:`speceq.stats.sequential_oracle_comparisons`).

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
from speceq.verdicts.kinds import TestKind


def planned_tests(case: Case, *, oracle: bool, has_draft: bool, full_law: bool = True) -> list[str]:
    """Names of the sequential tests of a (sampling) case, fixed before any data.

    full_law: the oracle knows the whole processed law for the case's parameters (else the
    log-likelihood comparison, which needs E_p log p, is not planned).
    """
    L = case.params.max_new_tokens
    names = [f"seq pair prompt {j} position 0" for j in range(len(case.prompts))]
    if L >= 2:
        names.append("seq pair joint first 2")
        if not case.params.ignore_eos:
            names.append("seq pair length")
    if not oracle:
        names += [f"seq pair prompt 0 position {t}" for t in range(1, L)]
    else:
        names.append("seq argmax comparison")
        if full_law:
            names.append("seq log-likelihood comparison")
        names.append("seq PIT comparison")
        if has_draft:
            names += ["seq draft ratio comparison", "seq draft log-ratio comparison"]
        names.append("seq support comparison")
    return names


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseSequentialEvidence:
    """The sequential tests of one case after ``n`` samples per engine.

    tests: one EProcessResult per planned test; crossing_samples: per test, the sample count
    at which it first crossed its threshold (None: not crossed); bound: the time-uniform TV
    upper bound (None before the first grid point). kinds: per test, what it is; places: per
    test, the (prompt, position) of a one-position test, else None (so no one reads a name back).
    """

    case_id: str
    n: int
    tests: tuple[seq.EProcessResult, ...]
    crossing_samples: tuple[int | None, ...]
    bound: seq.SequentialTVBound | None
    kinds: tuple[TestKind, ...] = ()
    places: tuple[tuple[int, int] | None, ...] = ()

    @property
    def first_crossing(self) -> tuple[str, int] | None:
        """(test name, samples) of the earliest crossing, or None."""
        hits = [(n, t.name) for t, n in zip(self.tests, self.crossing_samples) if n is not None]
        return (min(hits)[1], min(hits)[0]) if hits else None


def _rows(batch: SampleBatch, prompt: int) -> tuple[np.ndarray, np.ndarray]:
    keep = np.asarray(batch.prompt_index) == prompt
    return batch.tokens[keep], batch.lengths[keep]


#: One evaluated test: its e-process, the sample count of its first crossing, its kind and (prompt, position).
_Evaluated = tuple[seq.EProcessResult, "int | None", TestKind, "tuple[int, int] | None"]


def _pair(name: str, a: np.ndarray, b: np.ndarray, level: float, kind: TestKind,
          place: tuple[int, int] | None = None) -> _Evaluated:
    res = seq.paired_exchangeability_eprocess(a, b, name=name, level=level)
    return res, None if res.first_crossing is None else res.first_crossing + 1, kind, place


def _oracle_tests(base_scores: TokenScores, scores: TokenScores, base: SampleBatch, cand: SampleBatch, prompts: int,
                  level: float) -> list[_Evaluated]:
    """The comparison e-processes; each crossing as the sample count (per engine) at which it happened.

    Their names are the values of their kinds (``seq argmax comparison``, ..., ``seq support comparison``).
    """
    found = stats.sequential_oracle_comparisons(base_scores, np.asarray(base.prompt_index), scores,
                                                np.asarray(cand.prompt_index), level=level)
    return [(t, None if row is None else row // prompts + 1, TestKind(t.name), None)
            for t, row in zip(found.tests, found.crossing_rows)]


def case_tv_bound(case: Case, base: SampleBatch, cand: SampleBatch, n: int, alpha: float) -> seq.SequentialTVBound | None:
    """The time-uniform TV upper bound of the case's prompt at n samples per engine.

    The largest per-position bound over the case's max_new_tokens positions, each at level
    alpha_k / max_new_tokens, between the baseline's and the candidate's laws (two-sample at
    every position, with or without an oracle: what ``equivalent`` certifies).
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
        _, ca, cb = stats.paired_counts(sa, sb)
        b = seq.sequential_tv_upper_bound(stats.tv_distance(ca, cb), n, k, g, alpha, positions=L)
        if worst is None or b.upper > worst.upper:
            worst = b
    return worst


def evaluate_case(case: Case, base: SampleBatch, cand: SampleBatch, *, names: Sequence[str], level: float,
                  alpha: float, scores: TokenScores | None = None,
                  base_scores: TokenScores | None = None) -> CaseSequentialEvidence:
    """Every planned sequential test of ``case`` on all rows so far, and its TV bound.

    level: the share of alpha of each test (alpha / tests in the run); alpha: the case's
    level for the TV bound. ``scores`` / ``base_scores``: the oracle's scores of every row of
    the candidate / the baseline so far (rows numbered as in ``cand`` / ``base``), when an oracle is on.
    """
    names = list(names)
    P = len(case.prompts)
    results: list[_Evaluated] = []
    for j in range(P):
        ta, la = _rows(base, j)
        tb, lb = _rows(cand, j)
        results.append(_pair(f"seq pair prompt {j} position 0", stats.position_symbols(ta, la, 0),
                             stats.position_symbols(tb, lb, 0), level, TestKind.SEQ_PAIR_POSITION, (j, 0)))
    ta, la = _rows(base, 0)
    tb, lb = _rows(cand, 0)
    if "seq pair joint first 2" in names:
        results.append(_pair("seq pair joint first 2", stats.joint_symbols(ta, la, 2), stats.joint_symbols(tb, lb, 2),
                             level, TestKind.SEQ_PAIR_JOINT))
    if "seq pair length" in names:
        results.append(_pair("seq pair length", la, lb, level, TestKind.SEQ_PAIR_LENGTH))
    for t in range(1, case.params.max_new_tokens):
        name = f"seq pair prompt 0 position {t}"
        if name in names:
            results.append(_pair(name, stats.position_symbols(ta, la, t), stats.position_symbols(tb, lb, t), level,
                                 TestKind.SEQ_PAIR_POSITION, (0, t)))
    if scores is not None and base_scores is not None:
        results += _oracle_tests(base_scores, scores, base, cand, P, level)
    got = [r[0].name for r in results]
    if scores is not None and sorted(got) != sorted(names):
        raise ValueError(f"case {case.case_id!r}: evaluated tests {got} differ from the planned {names}")
    n = int(min(len(la), len(lb)))
    bound = case_tv_bound(case, base, cand, n, alpha) if n else None
    return CaseSequentialEvidence(case_id=case.case_id, n=n, tests=tuple(r[0] for r in results),
                                  crossing_samples=tuple(r[1] for r in results), bound=bound,
                                  kinds=tuple(r[2] for r in results), places=tuple(r[3] for r in results))
