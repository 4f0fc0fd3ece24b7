"""The decision layer: from raw test outcomes to per-case and run verdicts (pure, no I/O).

Every verdict, greedy ones included, is decided here and only here:

- Holm across ALL primary tests of the run, so the family-wise error of "shifted" verdicts
  is at most alpha under any dependence between tests and cases. When the run also has
  run-level pooled tests, Holm is weighted: the pooled tests share
  :data:`POOLED_ALPHA_SHARE` of the weight and the cases' tests the rest, each share split
  equally (:func:`first_step_levels`).
- Benjamini-Hochberg q-values across all tests of the run (diagnostic only).
- Per case: ``shifted`` iff a hard failure occurred (candidate rows with tokens the oracle
  calls impossible where the baseline has none, significant at the first Holm step; a greedy
  mismatch) or a Holm-adjusted primary p-value is <= alpha. A greedy case is otherwise
  ``inconclusive`` when a divergence could not be classified (no oracle) or its row-mismatch
  TV bound is not below the tolerance, and ``equivalent`` when its rows are equal or differ
  only at numerical near-ties AND that bound is below the tolerance. A sampling case is
  ``equivalent`` iff no primary test rejects and the TV upper bound is below the tolerance,
  else ``inconclusive`` with the sample size that would decide.
- A ``shifted`` sampling case carries its size: the largest TV of its prompt's per-position token laws
  and of the joint law of its first two tokens, held-out estimate
  and [low, high] at level 1 - alpha (:func:`speceq.stats.max_tv_size`), in its reason and as
  ``size``. It is ``within-tolerance`` instead when the numerics tolerance is on (> 0), no hard
  failure occurred, every rejecting primary test is one of :data:`SIZED_KINDS` (tests of the
  per-position and first-two-token laws and of row scores; a kind not listed, or a test of a companion
  prompt's position, keeps ``shifted``) and
  the size's upper bound is below the numerics tolerance.
- A ``shifted`` greedy case carries its size too (:func:`greedy_size`): the share of its row pairs (every prompt of
  the batch) that diverge beyond a numerical near-tie, with its two-sided Clopper-Pearson interval at 1 - alpha;
  the pairs that diverge only at near-ties are counted apart in its reason. It has no TV estimate (the share of
  row pairs that differ bounds a TV from above, it does not estimate one) and is never ``within-tolerance`` (a
  greedy mismatch is a hard failure).
- Row independence (:data:`TestKind.ROW_INDEPENDENCE`): the candidate's test is primary and, when it
  rejects, its finding leads the ``shifted`` reason ("rows are not independent: ..."): rows sharing
  randomness are not i.i.d. draws of the target law. A dependent baseline (its test a diagnostic,
  at a case test's first Holm step) is said at the end of any reason (:func:`dependence_note`). An engine whose
  test could not run (every row from a single forward batch of a single call: nothing independent to compare) is
  said at the end of a detected difference's reason (:func:`untested_note`), from its ``independence untested``
  note.
- Run: the worst of its cases (:meth:`speceq.verdicts.verdict.Verdict.worst`): ``shifted``, then
  ``inconclusive``, ``within-tolerance``, ``equivalent``; a rejecting pooled test makes it ``shifted``.
- Certificate ``pit-law`` (opt-in): a sampling case is ``equivalent`` iff no primary test
  rejects and the PIT-law upper bound (:mod:`speceq.stats.pit_law`) is below the tolerance;
  its reason says what that certifies and gives the per-position TV bound next to it. Under
  the default ``tv`` certificate an inconclusive case with a PIT-law bound says what that
  coarser certificate would need.

The required n of an inconclusive case (samples per engine) is the larger of (a) the size
at which the TV certificate succeeds with probability 0.9 when the engines truly agree and
sample the law :func:`speceq.stats.estimate_law` estimates from the pooled counts of the
position the bound waits on (:func:`speceq.stats.samples_for`: the plug-in TV's upward bias
on that law plus the bound's margin, at every one of the bound's positions), and (b) the size
at which the case's chi-square, with the bins it keeps at that size, detects a TV shift of
``tolerance`` with power 0.9 at the level of a case test's first Holm step (alpha / (number
of primary tests), or its weighted share when pooled tests run). Equivalent and inconclusive
sampling cases also carry ``min_detectable_tv``: the smallest TV shift that chi-square detects
with power 0.9 at the current size (:func:`speceq.stats.min_detectable_tv`). Evidence without
pooled counts falls back to the effective-support formulas of speceq.stats.sample_size.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from speceq.core.defaults import NUMERICS_TOLERANCE
from speceq.stats.design import estimate_law, min_detectable_tv, samples_for
from speceq.stats.multitest import benjamini_hochberg, holm
from speceq.stats.pit_law import required_n_pit_law
from speceq.stats.proportion import clopper_pearson
from speceq.stats.results import Effect
from speceq.stats.sample_size import required_n_equivalence_two_sample, required_n_two_sample
from speceq.verdicts.evidence import CERTIFIES, CERTIFIES_PIT_LAW, GREEDY_CERTIFIES, CaseEvidence, GreedyEvidence
from speceq.verdicts.failures import HardFailure
from speceq.verdicts.kinds import EffectName, TestKind, named_effect
from speceq.verdicts.reasons import effect_bound, failure_lines, near_tie_words, note_line, size_words
from speceq.verdicts.result import TestOutcome
from speceq.verdicts.verdict import Verdict

#: Power of detection, and probability of certification, at the required sample size.
DESIGN_POWER = 0.9
#: Share of the Holm weight (of alpha at the first step) that the run-level pooled tests hold
#: together when a run has them; the cases' primary tests hold the rest. Half to the tests of
#: the global null "no case shifted", half to the cases: a bug that shifts every case a little
#: (an acceptance rule slightly off) is seen only by the pooled tests, while a bug of one case
#: loses little (at 56 case tests and alpha 1e-3 a case test's first step goes from z 4.31 to 4.44).
POOLED_ALPHA_SHARE = 0.5

#: Tests whose rejection the case's size can stand for (the size bounds the TV of every per-position token
#: law of the case's prompt and of the joint law of its first two tokens): those laws' chi-squares, the row
#: lengths (END at each position), the first token against the oracle, the support, and the row-score
#: comparisons and z-tests (sums over positions of per-token scores). Not listed, so a rejection keeps
#: ``shifted``: any kind added later (e.g. a test that rows are independent) until someone says what sizes it.
SIZED_KINDS = frozenset({
    TestKind.CHI2_POSITION, TestKind.CHI2_JOINT, TestKind.CHI2_LENGTH, TestKind.CHI2_FIRST_TOKEN_GOF, TestKind.SUPPORT_COMPARISON,
    TestKind.ARGMAX_COMPARISON, TestKind.LOG_LIKELIHOOD_COMPARISON, TestKind.PIT_COMPARISON,
    TestKind.DRAFT_RATIO_COMPARISON, TestKind.DRAFT_LOG_RATIO_COMPARISON, TestKind.PIT_UNIFORMITY,
    TestKind.Z_ARGMAX_LEAK, TestKind.Z_TEMPERATURE_DRIFT, TestKind.Z_DRAFT_RATIO, TestKind.Z_DRAFT_DRIFT,
})

__all__ = ["DESIGN_POWER", "POOLED_ALPHA_SHARE", "SIZED_KINDS", "CaseDecision", "CaseEvidence", "GreedyEvidence", "PooledDecision",
           "declare_lossy", "decide_run", "decide_run_pooled", "first_step_levels", "greedy_size", "run_verdict"]


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
    min_detectable_tv: float | None = None
    size: Effect | None = None

    def summary(self) -> str:
        return f"{self.case_id}: {self.verdict.upper()} — {self.reason}"


def _numerics_tolerance_iv(value: object) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"`numerics_tolerance` must be a TV distance in [0, 1] (0: off), got {value!r}")
    return float(value)


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
    for f in case.hard_failures:
        if not isinstance(f, HardFailure):
            raise TypeError(f"{where}: `hard_failures` must hold HardFailure records (with token ids), got "
                            f"{type(f).__name__}")
    for t in case.tests:
        if not isinstance(t, TestOutcome):
            raise TypeError(f"{where}: `tests` must hold TestOutcome objects, got {type(t).__name__}")
        if not isinstance(t.pvalue, (int, float)) or not 0.0 <= float(t.pvalue) <= 1.0:
            raise ValueError(f"{where}: test {t.name!r} has p-value {t.pvalue!r}, expected a number in [0, 1]")


def first_step_levels(alpha: float, case_tests: int, pooled_tests: int) -> tuple[float, float]:
    """Levels (case test, pooled test) at which the run's weighted Holm tests each first.

    case_tests / pooled_tests: primary tests of the cases and of the run-level pooled family.
    With both present the pooled tests share :data:`POOLED_ALPHA_SHARE` of alpha, else every
    test gets alpha / (number of tests), plain Holm. The family-wise error stays at most alpha.
    """
    if case_tests > 0 and pooled_tests > 0:
        return (alpha * (1.0 - POOLED_ALPHA_SHARE) / case_tests, alpha * POOLED_ALPHA_SHARE / pooled_tests)
    level = alpha / max(1, case_tests + pooled_tests)
    return level, level


def _law(case: CaseEvidence) -> np.ndarray | None:
    """The law the sizes are computed for, estimated from the pooled counts (None: none recorded)."""
    counts = case.pooled_counts
    if counts is None or int(np.sum(counts)) == 0:
        return None
    vocabulary = None if case.vocabulary is None else max(case.vocabulary, int(np.count_nonzero(counts)))
    return estimate_law(np.asarray(counts), vocabulary)


def _required_n(case: CaseEvidence, alpha: float, tolerance: float, level: float, law: np.ndarray | None) -> int:
    bound_alpha = case.bound_alpha or alpha
    if law is None:
        bins = max(2, math.ceil(case.effective_support))
        detect = required_n_two_sample(tolerance, bins, level, DESIGN_POWER)
        certify = required_n_equivalence_two_sample(tolerance, float(case.effective_support), bound_alpha,
                                                    DESIGN_POWER)
        return max(detect, certify)
    certify = samples_for(tolerance, [law] * max(1, case.positions), alpha=bound_alpha, probability=DESIGN_POWER).n
    bins = min_detectable_tv(certify, law, level=level, power=DESIGN_POWER).bins
    return max(certify, required_n_two_sample(tolerance, bins, level, DESIGN_POWER))


def _detectable(case: CaseEvidence, level: float, law: np.ndarray | None) -> float | None:
    now = _current_n(case)
    if law is None or now < 1:
        return None
    return min_detectable_tv(now, law, level=level, power=DESIGN_POWER).tv


def _current_n(case: CaseEvidence) -> int:
    return min(case.n_baseline, case.n_candidate)


#: Certificates an ``equivalent`` sampling verdict may rest on (speceq.core.defaults.CERTIFICATES).
CERTIFICATES = ("tv", "pit-law")


@dataclass(frozen=True, slots=True, kw_only=True)
class PooledDecision:
    """The run-level tests pooled over cases, Holm-adjusted together with every case's primary tests.

    rejects: some pooled primary test has a Holm-adjusted p <= alpha, so the run is ``shifted``
    whatever its cases' verdicts (some case's law differs, though none alone shows it at this
    budget); reason: one line saying which test and by how much, empty when none rejects.
    """

    tests: tuple[TestOutcome, ...] = ()
    rejects: bool = False
    reason: str = ""


def decide_run(evidence: Sequence[CaseEvidence], *, alpha: float, tolerance: float,
               certificate: str = "tv", numerics_tolerance: float = NUMERICS_TOLERANCE) -> list[CaseDecision]:
    """Decide every case of a run (see the module docstring); decisions in input order."""
    return decide_run_pooled(evidence, (), alpha=alpha, tolerance=tolerance, certificate=certificate,
                             numerics_tolerance=numerics_tolerance)[0]


def decide_run_pooled(evidence: Sequence[CaseEvidence], pooled: Sequence[TestOutcome], *, alpha: float,
                      tolerance: float, certificate: str = "tv",
                      numerics_tolerance: float = NUMERICS_TOLERANCE) -> tuple[list[CaseDecision], PooledDecision]:
    """Decide every case and the run-level ``pooled`` tests in one Holm family (see the module docstring).

    pooled: tests of the intersection null "no case shifted" (e.g. a row score's comparison
    pooled over the cases, :func:`speceq.stats.pooled_comparison`); their primary ones join
    the Holm family of the cases' primary tests, weighted to hold :data:`POOLED_ALPHA_SHARE` of
    it together, so the family-wise error of every ``shifted`` (a case's or the run's) stays at
    most alpha.
    """
    cases, alpha, tolerance = _decide_run_iv(evidence, alpha, tolerance)
    numerics_tolerance = _numerics_tolerance_iv(numerics_tolerance)
    if certificate not in CERTIFICATES:
        raise ValueError(f"`certificate` must be one of {', '.join(CERTIFICATES)}, got {certificate!r}")
    run_tests = list(pooled)
    for t in run_tests:
        if not isinstance(t, TestOutcome):
            raise TypeError(f"`pooled` must hold TestOutcome objects, got {type(t).__name__}")
        if not isinstance(t.pvalue, (int, float)) or not 0.0 <= float(t.pvalue) <= 1.0:
            raise ValueError(f"pooled test {t.name!r} has p-value {t.pvalue!r}, expected a number in [0, 1]")
    flat = [(ci, ti, t) for ci, c in enumerate(cases) for ti, t in enumerate(c.tests)]
    flat += [(-1, ti, t) for ti, t in enumerate(run_tests)]
    pvalues = np.array([t.pvalue for _, _, t in flat], dtype=np.float64)
    qvalues = benjamini_hochberg(pvalues)
    primary_idx = [i for i, (_, _, t) in enumerate(flat) if t.primary]
    n_pooled = sum(1 for i in primary_idx if flat[i][0] < 0)
    case_level, pooled_level = first_step_levels(alpha, len(primary_idx) - n_pooled, n_pooled)
    if case_level == pooled_level:  # equal weights (no pooled tests, or none of the cases): plain Holm, the same values
        adjusted_primary = holm(pvalues[primary_idx])
    else:
        weights = np.array([pooled_level if flat[i][0] < 0 else case_level for i in primary_idx])
        adjusted_primary = holm(pvalues[primary_idx], weights)
    adjusted = dict(zip(primary_idx, adjusted_primary.tolist()))

    filled: list[list[TestOutcome]] = [[] for _ in cases]
    run_filled: list[TestOutcome] = []
    for i, (ci, _, t) in enumerate(flat):
        done = dataclasses.replace(t, adjusted_pvalue=adjusted.get(i), qvalue=float(qvalues[i]))
        (run_filled if ci < 0 else filled[ci]).append(done)

    decisions = []
    for case, tests in zip(cases, filled):
        decisions.append(_decide_case(case, tuple(tests), alpha, tolerance, case_level, certificate,
                                      numerics_tolerance))
    return decisions, _decide_pooled(tuple(run_filled), alpha)


def declare_lossy(evidence: Sequence[CaseEvidence], decisions: Sequence[CaseDecision],
                  pooled: PooledDecision) -> tuple[list[CaseDecision], PooledDecision]:
    """The decisions of a run whose candidate declares itself lossy by design (``describe()["lossless"]`` False).

    A lossy method is measured, not judged: every case is ``lossy``, its reason leading with its distance to
    the baseline (the size of :func:`speceq.stats.max_tv_size` where the analysis has one, else the TV estimate
    and upper bound), then what the tests said; a pooled rejection no longer makes the run ``shifted``.
    """
    out = []
    for case, d in zip(evidence, decisions, strict=True):
        size = d.size or _size(case, alpha=None)
        if size is not None:
            distance = size_words(size)
        elif d.tv_estimate is not None and d.tv_upper_bound is not None:
            distance = f"TV estimate {d.tv_estimate:.4f}, upper bound {d.tv_upper_bound:.4f}"
        elif d.tv_upper_bound is not None:
            distance = f"TV upper bound {d.tv_upper_bound:.4f} ({'whole greedy rows' if case.greedy else 'no estimate'})"
        else:
            distance = "no distance computed"
        reason = f"declared lossy by the engine, so measured, not judged: {distance}; the tests said {d.verdict}: {d.reason}"
        out.append(dataclasses.replace(d, verdict=Verdict.LOSSY, reason=reason, size=size))
    if pooled.rejects:
        pooled = dataclasses.replace(pooled, rejects=False, reason=f"(a lossy candidate: measured, not judged) {pooled.reason}")
    return out, pooled


def _decide_pooled(tests: tuple[TestOutcome, ...], alpha: float) -> PooledDecision:
    primary = [t for t in tests if t.primary and t.adjusted_pvalue is not None]
    best = min(primary, key=lambda t: (t.adjusted_pvalue, t.pvalue), default=None)
    if best is None or best.adjusted_pvalue > alpha:
        return PooledDecision(tests=tests)
    detail = f": {best.summary}" if best.summary else ""
    return PooledDecision(tests=tests, rejects=True, reason=(
        f"{best.name} rejects, Holm-adjusted p={best.adjusted_pvalue:.3g} <= alpha={alpha:g}: some case's candidate "
        f"law differs from the baseline's (each case's own tests may miss it at this budget){detail}"))


def _decide_case(
    case: CaseEvidence, tests: tuple[TestOutcome, ...], alpha: float, tolerance: float, first_level: float,
    certificate: str = "tv", numerics_tolerance: float = 0.0,
) -> CaseDecision:
    common = dict(case_id=case.case_id, tests=tests, tv_estimate=case.tv_estimate, tv_upper_bound=case.tv_upper_bound)
    size = _size(case, alpha)
    sized = f"; {size_words(size)}" if size is not None else ""
    if size is not None and case.greedy is not None:
        sized += f"; {near_tie_words(case.greedy.rows_near_tie_only)}"
    if case.hard_failures:
        lines = failure_lines(case.hard_failures)
        more = f" (+{len(lines) - 1} more)" if len(lines) > 1 else ""
        return CaseDecision(verdict="shifted", reason=f"hard failure: {lines[0]}{more}{sized}", size=size, **common)
    primary = [t for t in tests if t.primary]
    best = min(primary, key=lambda t: (t.adjusted_pvalue, t.pvalue), default=None)
    dependent = dependence_note(tests, alpha, first_level)
    if best is not None and best.adjusted_pvalue is not None and best.adjusted_pvalue <= alpha:
        plug_in = "" if size is not None else effect_bound(best)  # the size replaces the test's plug-in TV
        detail = f": {'; '.join(x for x in (best.summary, plug_in) if x)}" if best.summary \
            else f" (statistic {best.statistic:.4g})"
        dep = next((t for t in primary if t.kind is TestKind.ROW_INDEPENDENCE and t.adjusted_pvalue is not None
                    and t.adjusted_pvalue <= alpha), None)
        if dep is not None:  # the finding leads: it may be all that the other rejections show
            also = "" if best is dep else (
                f"; {best.name} rejects too (Holm-adjusted p={best.adjusted_pvalue:.3g}), but its p-value assumes "
                "independent rows, so it may read this dependence as a shift")
            return CaseDecision(verdict="shifted", reason=(
                f"rows are not independent: {dep.name} rejects, Holm-adjusted p={dep.adjusted_pvalue:.3g} <= "
                f"alpha={alpha:g}: {dep.summary}; the candidate's rows of one call share randomness, so they are not "
                f"independent draws of the target law (whatever each row's own law){also}{sized}"), size=size, **common)
        dependent += untested_note(case)  # a detected difference: it may be randomness the rows share, unseen
        rejects = f"{best.name} rejects, Holm-adjusted p={best.adjusted_pvalue:.3g} <= alpha={alpha:g}{detail}"
        rejecting = [t for t in primary if t.adjusted_pvalue is not None and t.adjusted_pvalue <= alpha]
        if (size is not None and 0.0 < numerics_tolerance and size.high is not None and size.high < numerics_tolerance
                and all(_sized(t) for t in rejecting)):
            return CaseDecision(verdict="within-tolerance", reason=(
                f"a difference is detected ({rejects}) but its size is certified below the numerics tolerance: "
                f"{size_words(size)}, upper bound < {numerics_tolerance:g}; the size certified is the largest TV of "
                f"the case prompt's per-position token laws and of the joint law of its first two tokens{dependent}"),
                size=size, **common)
        unsized = sorted({t.name for t in rejecting if not _sized(t)})
        why = ""
        if size is not None and 0.0 < numerics_tolerance:
            why = (f" (not within the numerics tolerance {numerics_tolerance:g}: "
                   + (f"{', '.join(unsized)} also rejects and the size does not stand for it)" if unsized
                      else "the upper bound is not below it)"))
        return CaseDecision(verdict="shifted", reason=f"{rejects}{sized}{why}{dependent}", size=size, **common)
    if case.greedy is not None:
        return _decide_greedy(case.greedy, alpha, tolerance, common)
    if dependent:
        decided = _decide_sampling(case, tests, alpha, tolerance, first_level, certificate, best, common)
        return dataclasses.replace(decided, reason=decided.reason + dependent)
    return _decide_sampling(case, tests, alpha, tolerance, first_level, certificate, best, common)


def _sized(test: TestOutcome) -> bool:
    """Whether the case's size stands for ``test``'s rejection: a kind of :data:`SIZED_KINDS`, of the case's prompt
    (a test of a companion prompt's position is not: the size bounds the case prompt's laws only)."""
    return test.kind in SIZED_KINDS and test.prompt in (None, 0)


def greedy_size(g: GreedyEvidence, alpha: float) -> Effect | None:
    """The size of a greedy case's difference: the share of its row pairs (every prompt of the batch) that diverge
    beyond a numerical near-tie, with its two-sided (1 - alpha) Clopper-Pearson interval
    (:func:`speceq.stats.clopper_pearson`, the row pairs as independent trials). None when a divergence could not be
    classified (no oracle): the share would then be a guess. Near-ties are not in it (``rows_near_tie_only``)."""
    if g.unexplained or g.rows_compared < 1:
        return None
    p = clopper_pearson(g.rows_beyond_near_tie, g.rows_compared, alpha)
    return named_effect(EffectName.GREEDY_DIVERGENCE, p.estimate, low=p.low, high=p.high, level=p.level)


def _size(case: CaseEvidence, alpha: float | None) -> Effect | None:
    """What a detected difference of ``case`` says its size is: the greedy share (at ``alpha``; None: none asked)
    or the sampling case's TV interval."""
    if case.greedy is not None:
        return None if alpha is None else greedy_size(case.greedy, alpha)
    return None if case.size is None else case.size.effect()


def untested_note(case: CaseEvidence) -> str:
    """``"; the candidate's row independence: not tested: ..."`` for each engine whose independence test could not
    run (every row from a single forward batch of a single call, say), worded by
    :func:`speceq.verdicts.reasons.note_line`, else ''. Said in the reason of a detected difference: the tests that
    detected it assume independent rows, and nothing here could check that they are."""
    return "".join(f"; {note_line(n)}" for n in case.independence_untested)


def dependence_note(tests: Sequence[TestOutcome], alpha: float, first_level: float) -> str:
    """``"; but the baseline's rows are not independent (...)"`` when a row-independence test found dependence, else ''.

    Found: the candidate's (primary) test at a Holm-adjusted p <= alpha, the baseline's (a diagnostic) at a
    p-value at most the first Holm step of a case test. Every token-law test assumes independent rows, so a
    reason resting on one says so.
    """
    found = []
    for t in tests:
        if t.kind is not TestKind.ROW_INDEPENDENCE:
            continue
        p = t.adjusted_pvalue if t.primary else t.pvalue
        if p is not None and p <= (alpha if t.primary else first_level):
            who = "candidate" if t.primary else "baseline"
            found.append(f"the {who}'s rows are not independent ({t.name}: p={p:.3g})")
    if not found:
        return ""
    return (f"; but {' and '.join(found)}: the token-law tests' p-values and bounds assume independent rows, "
            "so they may read shared randomness as a shift")


def _decide_sampling(case: CaseEvidence, tests: tuple[TestOutcome, ...], alpha: float, tolerance: float,
                     first_level: float, certificate: str, best: TestOutcome | None, common: dict) -> CaseDecision:
    """A sampling case without hard failure or primary rejection: ``equivalent`` or ``inconclusive``."""
    smallest = f"smallest Holm-adjusted p={best.adjusted_pvalue:.3g}" if best is not None else "no primary test"
    law = _law(case)
    common["min_detectable_tv"] = _detectable(case, first_level, law)
    if certificate == "pit-law":
        return _decide_pit_law(case, alpha, tolerance, smallest, common)
    bound = case.tv_upper_bound
    if bound is not None and bound < tolerance:
        return CaseDecision(
            verdict="equivalent",
            reason=(f"no primary test rejects ({smallest}) and TV upper bound {bound:.4f} < tolerance {tolerance:g}; "
                    f"this {CERTIFIES}"),
            **common,
        )
    required = _required_n(case, alpha, tolerance, first_level, law)
    now = _current_n(case)
    why = "no TV upper bound was computed" if bound is None else f"TV upper bound {bound:.4f} >= tolerance {tolerance:g}"
    if required > now:
        need = f"about {required} samples per engine would decide with probability {DESIGN_POWER:g} (now {now})"
    else:
        need = (f"the design size {required} samples per engine is reached (now {now}); "
                "the TV may be close to the tolerance")
    coarse = ""
    if case.pit_law_upper_bound is not None:
        n_pit = required_n_pit_law(tolerance, max(1, case.pit_law_positions), alpha, DESIGN_POWER)
        coarse = (f"; the coarser PIT-law bound is {case.pit_law_upper_bound:.4f} (--certificate pit-law certifies "
                  f"it below {tolerance:g} at about {n_pit} samples per engine)")
    return CaseDecision(
        verdict="inconclusive", reason=f"no primary test rejects ({smallest}) but {why}; {need}{coarse}",
        required_n=required, **common,
    )


def _decide_pit_law(case: CaseEvidence, alpha: float, tolerance: float, smallest: str, common: dict) -> CaseDecision:
    """A sampling case under the PIT-law certificate (no hard failure, no primary rejection)."""
    bound = case.pit_law_upper_bound
    tv = "" if case.tv_upper_bound is None else f"; its per-position TV upper bound is {case.tv_upper_bound:.4f}"
    if bound is None:
        return CaseDecision(verdict="inconclusive", reason=(
            f"no primary test rejects ({smallest}) but the PIT-law certificate needs the oracle's scores of "
            f"the candidate (a full-law oracle) and there are none{tv}"), **common)
    required = required_n_pit_law(tolerance, max(1, case.pit_law_positions), alpha, DESIGN_POWER)
    if bound < tolerance:
        return CaseDecision(verdict="equivalent", reason=(
            f"no primary test rejects ({smallest}) and PIT-law upper bound {bound:.4f} < tolerance {tolerance:g}; "
            f"this {CERTIFIES_PIT_LAW}{tv}"), **common)
    now = _current_n(case)
    need = (f"about {required} samples per engine would certify it with probability {DESIGN_POWER:g} (now {now})"
            if required > now else f"the design size {required} is reached (now {now}); the law may be close to "
            "the tolerance")
    return CaseDecision(verdict="inconclusive", reason=(
        f"no primary test rejects ({smallest}) but PIT-law upper bound {bound:.4f} >= tolerance {tolerance:g}; "
        f"{need}{tv}"), required_n=required, **common)


def greedy_rows_to_certify(tolerance: float, alpha: float) -> int:
    """Greedy rows per engine at which all-equal rows certify TV < tolerance: 1 - alpha^(1/n) < tolerance."""
    return math.floor(math.log(alpha) / math.log1p(-tolerance)) + 1


def _decide_greedy(g: GreedyEvidence, alpha: float, tolerance: float, common: dict) -> CaseDecision:
    """A greedy case without hard failure: unexplained divergences, or equal rows / near-ties and the bound."""
    rows = f"{g.rows_diverging} of {g.rows_compared} greedy row pairs (all prompts of the batch)"
    bound = (f"the case prompt's row pairs differ in {g.case_rows_diverging} of {g.case_rows}, so the TV of its "
             f"whole greedy rows <= {g.tv_upper_bound:.4f} (confidence 1-{alpha:g})")
    if g.unexplained:
        return CaseDecision(
            verdict="inconclusive",
            reason=f"{rows} diverge and {g.unexplained} could not be classified without an oracle; rerun with the oracle",
            **common,
        )
    forced = (f"; the {g.rows_teacher_forced} diverging candidate rows, teacher-forced through the oracle, follow the "
              "target's argmax or a near-tie at every position") if g.rows_teacher_forced else ""
    if g.rows_diverging == 0:
        what = f"all {g.rows_compared} greedy row pairs (all prompts of the batch) are equal token for token"
    else:
        what = (f"{rows} diverge, every one at a numerical near-tie (target top-2 margin <= {g.near_tie_nats:g} nats): "
                f"no real mismatch{forced}")
    if g.tv_upper_bound < tolerance:
        return CaseDecision(verdict="equivalent", reason=f"{what}; {bound} < tolerance {tolerance:g}; this "
                                                          f"{GREEDY_CERTIFIES}", **common)
    need = greedy_rows_to_certify(tolerance, alpha)
    if g.differ_rate >= tolerance:
        why = (f"the rows differ at near-ties in {g.differ_rate:.1%} of the case's row pairs, at or above the "
               f"tolerance {tolerance:g}: more rows will not certify it (the numerics' near-ties, not a mismatch; "
               "a larger --tolerance would)")
        return CaseDecision(verdict="inconclusive", reason=f"{what}; but {bound} >= tolerance {tolerance:g}: {why}",
                            **common)
    return CaseDecision(
        verdict="inconclusive",
        reason=(f"{what}; but {bound} >= tolerance {tolerance:g}: {g.case_rows} rows cannot certify it; "
                f"at least {need} equal greedy rows per engine would"),
        required_n=need if g.rows_diverging == 0 else None, **common,
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


def run_verdict(decisions: Sequence[CaseDecision], pooled: PooledDecision | None = None) -> Verdict:
    """``"shifted"`` if any case is shifted or a pooled test rejects, else ``"inconclusive"`` if any
    case is, else ``"equivalent"``."""
    checked = _run_verdict_iv(decisions)
    if pooled is not None and pooled.rejects:
        return Verdict.SHIFTED
    return Verdict.worst(d.verdict for d in checked)
