"""The decision layer: from raw test outcomes to per-case and run verdicts (pure, no I/O).

- Holm across ALL primary tests of the run, so the family-wise error of "shifted" verdicts
  is at most alpha under any dependence between tests and cases.
- Benjamini-Hochberg q-values across all tests of the run (diagnostic only).
- Per case: ``shifted`` iff a hard failure occurred (impossible under H0) or a Holm-adjusted
  primary p-value is <= alpha; ``equivalent`` iff none rejects and the TV upper bound is
  below the tolerance; otherwise ``inconclusive`` with the sample size that would decide.
- Run: ``shifted`` if any case is, else ``inconclusive`` if any case is, else ``equivalent``.

The required n of an inconclusive case is the larger of (a) the size at which the case's
chi-square detects a TV shift of ``tolerance`` with power 0.9 at the Bonferroni level
alpha / (number of primary tests), the first step of Holm, and (b) the size at which the TV
upper bound falls below ``tolerance`` when the engines truly agree (speceq.stats.power).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from speceq.stats.multitest import benjamini_hochberg, holm
from speceq.stats.power import (
    required_n_equivalence_oracle,
    required_n_equivalence_two_sample,
    required_n_oracle,
    required_n_two_sample,
)
from speceq.verdicts.result import TestOutcome

#: Power at which the required sample size of an inconclusive case is computed.
DESIGN_POWER = 0.9
_MODES = ("oracle", "two-sample")


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseEvidence:
    """What the analysis produced for one case, before any multiplicity adjustment.

    tests: raw outcomes (``adjusted_pvalue``/``qvalue`` left None). tv_estimate and
    tv_upper_bound: the case's plug-in TV and its upper confidence bound (None when not
    computed: the case can then not be ``equivalent``). effective_support: k used for the
    sample-size formulas (bins of the case's chi-square; k_eff = (sum sqrt p)^2 for
    certification). mode: ``"oracle"`` (n = candidate draws) or ``"two-sample"`` (n per group).
    hard_failures: descriptions of events impossible under H0 (e.g. a token with p = 0).
    """

    case_id: str
    tests: tuple[TestOutcome, ...]
    tv_estimate: float | None
    tv_upper_bound: float | None
    effective_support: float
    mode: Literal["oracle", "two-sample"]
    n_baseline: int
    n_candidate: int
    hard_failures: tuple[str, ...] = ()
    #: Level at which ``tv_upper_bound`` was computed when it is not ``alpha`` (e.g. alpha / L
    #: for a bound that holds over L positions at once); the certification size uses it.
    bound_alpha: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseDecision:
    """Verdict of one case: tests with Holm/BH values filled, a one-line reason, required n."""

    case_id: str
    verdict: str
    reason: str
    tests: tuple[TestOutcome, ...]
    tv_estimate: float | None = None
    tv_upper_bound: float | None = None
    required_n: int | None = None

    def summary(self) -> str:
        return f"{self.case_id}: {self.verdict.upper()} — {self.reason}"


def _decide_run_iv(evidence: object, alpha: object, tolerance: object) -> tuple[list[CaseEvidence], float, float]:
    if isinstance(evidence, (str, bytes)) or not isinstance(evidence, Sequence):
        raise TypeError(f"`evidence` must be a sequence of CaseEvidence, got {type(evidence).__name__}")
    cases = list(evidence)
    for i, case in enumerate(cases):
        if not isinstance(case, CaseEvidence):
            raise TypeError(f"`evidence[{i}]` must be a CaseEvidence, got {type(case).__name__}")
        _case_iv(case)
    ids = [c.case_id for c in cases]
    dup = sorted({x for x in ids if ids.count(x) > 1})
    if dup:
        raise ValueError(f"`evidence` repeats case ids {dup}")
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not 0.0 < float(alpha) < 1.0:
        raise ValueError(f"`alpha` must be a number in (0, 1), got {alpha!r}")
    if not isinstance(tolerance, (int, float)) or isinstance(tolerance, bool) or not 0.0 < float(tolerance) <= 1.0:
        raise ValueError(f"`tolerance` must be a TV distance in (0, 1], got {tolerance!r}")
    return cases, float(alpha), float(tolerance)


def _case_iv(case: CaseEvidence) -> None:
    where = f"case {case.case_id!r}"
    if case.mode not in _MODES:
        raise ValueError(f"{where}: `mode` must be one of {_MODES}, got {case.mode!r}")
    k = case.effective_support
    if not isinstance(k, (int, float)) or isinstance(k, bool) or not 1.0 <= float(k) < math.inf:
        raise ValueError(f"{where}: `effective_support` must be a finite number >= 1, got {k!r}")
    for name in ("n_baseline", "n_candidate"):
        v = getattr(case, name)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ValueError(f"{where}: `{name}` must be a non-negative integer, got {v!r}")
    for name in ("tv_estimate", "tv_upper_bound"):
        v = getattr(case, name)
        if v is not None and not (isinstance(v, (int, float)) and 0.0 <= float(v) <= 1.0):
            raise ValueError(f"{where}: `{name}` must be None or a TV distance in [0, 1], got {v!r}")
    for t in case.tests:
        if not isinstance(t, TestOutcome):
            raise TypeError(f"{where}: `tests` must hold TestOutcome objects, got {type(t).__name__}")
        if not isinstance(t.pvalue, (int, float)) or not 0.0 <= float(t.pvalue) <= 1.0:
            raise ValueError(f"{where}: test {t.name!r} has p-value {t.pvalue!r}, expected a number in [0, 1]")


def _required_n(case: CaseEvidence, alpha: float, tolerance: float, primary_count: int) -> int:
    level = alpha / max(1, primary_count)
    bins = max(2, round(case.effective_support))
    if case.mode == "oracle":
        detect = required_n_oracle(tolerance, bins, level, DESIGN_POWER)
        certify = required_n_equivalence_oracle(tolerance, float(case.effective_support), case.bound_alpha or alpha)
    else:
        detect = required_n_two_sample(tolerance, bins, level, DESIGN_POWER)
        certify = required_n_equivalence_two_sample(tolerance, float(case.effective_support), case.bound_alpha or alpha)
    return max(detect, certify)


def _current_n(case: CaseEvidence) -> int:
    return case.n_candidate if case.mode == "oracle" else min(case.n_baseline, case.n_candidate)


def decide_run(evidence: Sequence[CaseEvidence], *, alpha: float, tolerance: float) -> list[CaseDecision]:
    """Decide every case of a run (see the module docstring); decisions in input order."""
    cases, alpha, tolerance = _decide_run_iv(evidence, alpha, tolerance)
    flat = [(ci, ti, t) for ci, c in enumerate(cases) for ti, t in enumerate(c.tests)]
    pvalues = np.array([t.pvalue for _, _, t in flat], dtype=np.float64)
    qvalues = benjamini_hochberg(pvalues)
    primary_idx = [i for i, (_, _, t) in enumerate(flat) if t.primary]
    adjusted = dict(zip(primary_idx, holm(pvalues[primary_idx]).tolist()))

    filled: list[list[TestOutcome]] = [[] for _ in cases]
    for i, (ci, _, t) in enumerate(flat):
        filled[ci].append(dataclasses.replace(t, adjusted_pvalue=adjusted.get(i), qvalue=float(qvalues[i])))

    decisions = []
    for case, tests in zip(cases, filled):
        decisions.append(_decide_case(case, tuple(tests), alpha, tolerance, len(primary_idx)))
    return decisions


def _decide_case(
    case: CaseEvidence, tests: tuple[TestOutcome, ...], alpha: float, tolerance: float, primary_count: int
) -> CaseDecision:
    common = dict(case_id=case.case_id, tests=tests, tv_estimate=case.tv_estimate, tv_upper_bound=case.tv_upper_bound)
    if case.hard_failures:
        more = f" (+{len(case.hard_failures) - 1} more)" if len(case.hard_failures) > 1 else ""
        return CaseDecision(verdict="shifted", reason=f"hard failure: {case.hard_failures[0]}{more}", **common)
    primary = [t for t in tests if t.primary]
    best = min(primary, key=lambda t: (t.adjusted_pvalue, t.pvalue), default=None)
    if best is not None and best.adjusted_pvalue is not None and best.adjusted_pvalue <= alpha:
        detail = f": {best.summary}" if best.summary else f" (statistic {best.statistic:.4g})"
        return CaseDecision(
            verdict="shifted",
            reason=f"{best.name} rejects, Holm-adjusted p={best.adjusted_pvalue:.3g} <= alpha={alpha:g}{detail}",
            **common,
        )
    smallest = f"smallest Holm-adjusted p={best.adjusted_pvalue:.3g}" if best is not None else "no primary test"
    bound = case.tv_upper_bound
    if bound is not None and bound < tolerance:
        return CaseDecision(
            verdict="equivalent",
            reason=f"no primary test rejects ({smallest}) and TV upper bound {bound:.4f} < tolerance {tolerance:g}",
            **common,
        )
    required = _required_n(case, alpha, tolerance, primary_count)
    unit = "oracle-scored samples" if case.mode == "oracle" else "samples per engine"
    now = _current_n(case)
    if bound is None:
        why = "no TV upper bound was computed"
    else:
        why = f"TV upper bound {bound:.4f} >= tolerance {tolerance:g}"
    if required > now:
        need = f"about {required} {unit} would decide (now {now})"
    else:
        need = f"the design size {required} {unit} is reached (now {now}); the TV may be close to the tolerance"
    return CaseDecision(
        verdict="inconclusive", reason=f"no primary test rejects ({smallest}) but {why}; {need}", required_n=required, **common
    )


def _run_verdict_iv(decisions: object) -> list[CaseDecision]:
    if isinstance(decisions, (str, bytes)) or not isinstance(decisions, Sequence):
        raise TypeError(f"`decisions` must be a sequence of CaseDecision, got {type(decisions).__name__}")
    out = list(decisions)
    if not out:
        raise ValueError("`decisions` is empty: a run without cases has no verdict")
    for i, d in enumerate(out):
        if not isinstance(d, CaseDecision):
            raise TypeError(f"`decisions[{i}]` must be a CaseDecision, got {type(d).__name__}")
    return out


def run_verdict(decisions: Sequence[CaseDecision]) -> str:
    """``"shifted"`` if any case is shifted, else ``"inconclusive"`` if any is, else ``"equivalent"``."""
    verdicts = {d.verdict for d in _run_verdict_iv(decisions)}
    for verdict in ("shifted", "inconclusive"):
        if verdict in verdicts:
            return verdict
    return "equivalent"
