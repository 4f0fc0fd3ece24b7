"""The decision layer: Holm across the run, BH q-values, per-case and run verdicts."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from speceq.stats import (
    holm,
    required_n_equivalence_oracle,
    required_n_equivalence_two_sample,
    required_n_oracle,
    required_n_two_sample,
)
from speceq.verdicts.decide import CaseDecision, CaseEvidence, decide_run, run_verdict
from speceq.verdicts.result import TestOutcome as Outcome  # aliased: pytest would try to collect "Test*"


def _test(name: str, p: float, primary: bool = True) -> Outcome:
    return Outcome(name=name, family="two-sample", primary=primary, statistic=1.0, pvalue=p, summary=f"{name} p={p}")


def _case(case_id: str, pvalues: list[float], *, diagnostics: tuple[float, ...] = (), upper: float | None = 0.01,
          mode: str = "two-sample", k: float = 10.0, n: int = 1000, hard: tuple[str, ...] = ()) -> CaseEvidence:
    tests = tuple(_test(f"{case_id} t{i}", p) for i, p in enumerate(pvalues))
    tests += tuple(_test(f"{case_id} d{i}", p, primary=False) for i, p in enumerate(diagnostics))
    return CaseEvidence(case_id=case_id, tests=tests, tv_estimate=0.0 if upper is not None else None, tv_upper_bound=upper,
                        effective_support=k, mode=mode, n_baseline=n, n_candidate=n, hard_failures=hard)


def test_holm_spans_every_primary_test_of_the_run_and_bh_every_test() -> None:
    cases = [_case("a", [0.001, 0.2], diagnostics=(0.03,)), _case("b", [0.004, 0.5, 0.02])]
    decisions = decide_run(cases, alpha=0.01, tolerance=0.05)
    primary = [0.001, 0.2, 0.004, 0.5, 0.02]
    expected_holm = holm(np.array(primary))
    got = [t.adjusted_pvalue for d in decisions for t in d.tests if t.primary]
    assert got == pytest.approx(expected_holm.tolist())
    assert all(t.adjusted_pvalue is None for d in decisions for t in d.tests if not t.primary)
    all_p = [0.001, 0.2, 0.03, 0.004, 0.5, 0.02]
    q = [t.qvalue for d in decisions for t in d.tests]
    assert q == pytest.approx(stats.false_discovery_control(all_p, method="bh").tolist())
    # a: Holm p = 5 * 0.001 = 0.005 <= 0.01 -> shifted; b: 4 * 0.004 = 0.016 > 0.01 although raw p < alpha
    assert [d.verdict for d in decisions] == ["shifted", "equivalent"]
    assert "Holm-adjusted p=0.005" in decisions[0].reason and "a t0" in decisions[0].reason


def test_diagnostic_tests_never_decide() -> None:
    (d,) = decide_run([_case("a", [0.5], diagnostics=(1e-12,))], alpha=0.01, tolerance=0.05)
    assert d.verdict == "equivalent"


def test_equivalent_needs_the_bound_below_tolerance() -> None:
    decisions = decide_run(
        [_case("in", [0.5], upper=0.049), _case("at", [0.5], upper=0.05), _case("none", [0.5], upper=None)],
        alpha=0.01, tolerance=0.05,
    )
    assert [d.verdict for d in decisions] == ["equivalent", "inconclusive", "inconclusive"]
    assert "TV upper bound 0.0490 < tolerance 0.05" in decisions[0].reason
    assert decisions[0].required_n is None and "no TV upper bound" in decisions[2].reason


@pytest.mark.parametrize("mode", ["two-sample", "oracle"])
def test_inconclusive_reports_the_sample_size_that_would_decide(mode: str) -> None:
    cases = [_case("a", [0.3, 0.6], upper=0.2, mode=mode, k=12.0, n=500), _case("b", [0.9, 0.8])]
    d = decide_run(cases, alpha=0.01, tolerance=0.05)[0]
    level = 0.01 / 4  # Bonferroni level of Holm's first step: 4 primary tests in the run
    if mode == "oracle":
        expected = max(required_n_oracle(0.05, 12, level), required_n_equivalence_oracle(0.05, 12.0, 0.01))
        unit = "oracle-scored samples"
    else:
        expected = max(required_n_two_sample(0.05, 12, level), required_n_equivalence_two_sample(0.05, 12.0, 0.01))
        unit = "samples per engine"
    assert d.verdict == "inconclusive" and d.required_n == expected
    assert f"about {expected} {unit} would decide (now 500)" in d.reason


def test_hard_failure_is_shifted_whatever_the_p_values() -> None:
    (d,) = decide_run([_case("a", [0.9], hard=("token 7 at row 3 has p = 0", "another"))], alpha=0.01, tolerance=0.05)
    assert d.verdict == "shifted" and d.reason == "hard failure: token 7 at row 3 has p = 0 (+1 more)"


def test_run_verdict() -> None:
    def dec(v: str) -> CaseDecision:
        return CaseDecision(case_id=v, verdict=v, reason="", tests=())

    assert run_verdict([dec("equivalent"), dec("shifted"), dec("inconclusive")]) == "shifted"
    assert run_verdict([dec("equivalent"), dec("inconclusive")]) == "inconclusive"
    assert run_verdict([dec("equivalent")]) == "equivalent"
    with pytest.raises(ValueError, match="empty"):
        run_verdict([])


def test_family_wise_error_is_controlled_under_the_null() -> None:
    """Runs of 20 cases x 3 primary tests with independent U(0,1) p-values: the share of runs
    with any ``shifted`` case stays at most alpha (R = 500 runs, alpha = 0.05)."""
    rng = np.random.default_rng(7)
    reps, alpha = 500, 0.05
    any_shift = 0
    for _ in range(reps):
        cases = [_case(f"c{i}", rng.random(3).tolist()) for i in range(20)]
        any_shift += run_verdict(decide_run(cases, alpha=alpha, tolerance=0.05)) == "shifted"
    rate = any_shift / reps
    print(f"family-wise error {rate:.3f} over R={reps} at alpha={alpha}")
    assert rate <= alpha + 2 * math.sqrt(alpha * (1 - alpha) / reps)


@pytest.mark.parametrize(
    ("cases", "kwargs", "message"),
    [
        ([_case("a", [float("nan")])], {}, "case 'a': test 'a t0' has p-value nan"),
        ([_case("a", [0.5]), _case("a", [0.5])], {}, "repeats case ids"),
        ([_case("a", [0.5], mode="oracle-ish")], {}, "`mode`"),
        ([_case("a", [0.5], k=0.5)], {}, "`effective_support`"),
        ([_case("a", [0.5])], {"alpha": 0.0}, "`alpha`"),
        ([_case("a", [0.5])], {"tolerance": 1.5}, "`tolerance`"),
    ],
)
def test_invalid_evidence_names_the_case_and_field(cases: list, kwargs: dict, message: str) -> None:
    settings = {"alpha": 0.01, "tolerance": 0.05, **kwargs}
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        decide_run(cases, **settings)
    with pytest.raises(TypeError, match="`evidence`"):
        decide_run("abc", alpha=0.01, tolerance=0.05)
