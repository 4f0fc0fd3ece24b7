"""The within-tolerance outcome: a detected difference whose certified size is below the numerics tolerance."""

from __future__ import annotations

import pytest

from speceq.stats import TVInterval
from speceq.verdicts.decide import SIZED_KINDS, CaseEvidence, decide_run, run_verdict
from speceq.verdicts.failures import FailureKind, HardFailure
from speceq.verdicts.kinds import TestKind
from speceq.verdicts.result import TestOutcome as Outcome  # aliased: pytest would try to collect "Test*"
from speceq.verdicts.verdict import Verdict

_IMPOSSIBLE = HardFailure(kind=FailureKind.OUTSIDE_MARGIN, prompt=0, position=1, token=97, prefix=(104, 105, 32),
                          vocab_size=259, margin_nats=2.0, threshold_nats=0.5, row=3)


def _size(high: float, low: float = 0.001, estimate: float = 0.004) -> TVInterval:
    return TVInterval(estimate=estimate, low=low, high=high, plug_in=0.04, level=0.999, n_a=60000, n_b=60000,
                      positions=4, position=1)


def _case(case_id: str, p: float, *, kind: TestKind | None = TestKind.LOG_LIKELIHOOD_COMPARISON, high: float | None = 0.015,
          hard: tuple[HardFailure, ...] = ()) -> CaseEvidence:
    tests = (Outcome(name=f"{kind} {case_id}", family="oracle comparison", primary=True, statistic=5.0, pvalue=p,
                     kind=kind),
             Outcome(name=f"chi2 position 0 {case_id}", family="two-sample", primary=True, statistic=1.0, pvalue=0.5,
                     kind=TestKind.CHI2_POSITION))
    return CaseEvidence(case_id=case_id, tests=tests, tv_estimate=0.04, tv_upper_bound=0.05, effective_support=10.0,
                        n_baseline=60000, n_candidate=60000, hard_failures=hard,
                        size=None if high is None else _size(high))


def test_a_detected_difference_certified_below_the_tolerance_is_within_tolerance() -> None:
    (d,) = decide_run([_case("a", 1e-9)], alpha=1e-3, tolerance=0.15, numerics_tolerance=0.02)
    assert d.verdict == Verdict.WITHIN_TOLERANCE
    assert d.size is not None and (d.size.estimate, d.size.low, d.size.high) == (0.004, 0.001, 0.015)
    assert "certified below the numerics tolerance" in d.reason and "0.0150" in d.reason and "< 0.02" in d.reason


def test_an_upper_bound_at_or_above_the_tolerance_keeps_shifted_and_says_the_size() -> None:
    (d,) = decide_run([_case("a", 1e-9, high=0.02)], alpha=1e-3, tolerance=0.15, numerics_tolerance=0.02)
    assert d.verdict == Verdict.SHIFTED
    assert "size: largest TV of 4 laws 0.0040 in [0.0010, 0.0200]" in d.reason
    assert "the upper bound is not below it" in d.reason
    assert d.size is not None and d.size.high == 0.02


def test_nothing_detected_is_never_within_tolerance() -> None:
    (d,) = decide_run([_case("a", 0.5)], alpha=1e-3, tolerance=0.15, numerics_tolerance=0.02)
    assert d.verdict == Verdict.EQUIVALENT and d.size is None


def test_off_at_zero_and_without_a_size() -> None:
    (d,) = decide_run([_case("a", 1e-9)], alpha=1e-3, tolerance=0.15, numerics_tolerance=0.0)
    assert d.verdict == Verdict.SHIFTED and "size:" in d.reason and "numerics tolerance" not in d.reason
    (d,) = decide_run([_case("a", 1e-9, high=None)], alpha=1e-3, tolerance=0.15, numerics_tolerance=0.02)
    assert d.verdict == Verdict.SHIFTED and d.size is None


def test_a_hard_failure_stays_shifted_whatever_the_size() -> None:
    (d,) = decide_run([_case("a", 1e-9, hard=(_IMPOSSIBLE,))], alpha=1e-3, tolerance=0.15, numerics_tolerance=0.02)
    assert d.verdict == Verdict.SHIFTED and d.reason.startswith("hard failure") and "size:" in d.reason


def test_a_rejecting_test_the_size_does_not_stand_for_keeps_shifted() -> None:
    """Only the kinds listed are sized (a test of another kind, or an older result without a kind, stays shifted);
    the joint test of the first two tokens is, since the size includes that joint law."""
    assert TestKind.CHI2_JOINT in SIZED_KINDS
    (d,) = decide_run([_case("a", 1e-9, kind=TestKind.CHI2_JOINT)], alpha=1e-3, tolerance=0.15,
                      numerics_tolerance=0.02)
    assert d.verdict == Verdict.WITHIN_TOLERANCE
    (d,) = decide_run([_case("a", 1e-9, kind=None)], alpha=1e-3, tolerance=0.15,  # type: ignore[arg-type]
                      numerics_tolerance=0.02)
    assert d.verdict == Verdict.SHIFTED and "the size does not stand for it" in d.reason


def test_the_run_takes_the_worst_case() -> None:
    decisions = decide_run([_case("a", 1e-9), _case("b", 0.5)], alpha=1e-3, tolerance=0.15, numerics_tolerance=0.02)
    assert [d.verdict for d in decisions] == ["within-tolerance", "equivalent"]
    assert run_verdict(decisions) == Verdict.WITHIN_TOLERANCE and run_verdict(decisions).exit_code == 4
    decisions = decide_run([_case("a", 1e-9), _case("b", 1e-9, high=0.5)], alpha=1e-3, tolerance=0.15,
                           numerics_tolerance=0.02)
    assert run_verdict(decisions) == Verdict.SHIFTED


@pytest.mark.parametrize("bad", [-0.1, 1.5, True, "0.02"])
def test_a_bad_numerics_tolerance_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="numerics_tolerance"):
        decide_run([_case("a", 1e-9)], alpha=1e-3, tolerance=0.15, numerics_tolerance=bad)  # type: ignore[arg-type]


def test_a_companion_prompts_rejection_is_not_sized_by_the_case_prompts_size() -> None:
    """The size bounds the laws of the case's prompt only, so a chi-square of a companion prompt that rejects keeps
    ``shifted`` (before: within-tolerance, whatever the companion's shift)."""
    companion = Outcome(name="chi2 prompt 1 position 0", family="two-sample", primary=True, statistic=50.0, pvalue=1e-9,
                        kind=TestKind.CHI2_POSITION, prompt=1, position=0)
    case = _case("a", 0.5)
    case = CaseEvidence(**{**{f: getattr(case, f) for f in case.__dataclass_fields__}, "tests": (*case.tests, companion)})
    (d,) = decide_run([case], alpha=1e-3, tolerance=0.15, numerics_tolerance=0.02)
    assert d.verdict == Verdict.SHIFTED, d.reason
    assert "chi2 prompt 1 position 0 also rejects and the size does not stand for it" in d.reason
    own = Outcome(name="chi2 prompt 0 position 0", family="two-sample", primary=True, statistic=50.0, pvalue=1e-9,
                  kind=TestKind.CHI2_POSITION, prompt=0, position=0)
    case = CaseEvidence(**{**{f: getattr(case, f) for f in case.__dataclass_fields__}, "tests": (*_case("a", 0.5).tests, own)})
    (d,) = decide_run([case], alpha=1e-3, tolerance=0.15, numerics_tolerance=0.02)
    assert d.verdict == Verdict.WITHIN_TOLERANCE, d.reason
