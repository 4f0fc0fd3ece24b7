"""The decision layer: Holm across the run, BH q-values, per-case and run verdicts."""

from __future__ import annotations

import math

import numpy as np
import pytest
from binomial_tail import rejection_limit, reps_to_catch
from scipy import stats

from speceq.stats import holm, required_n_equivalence_two_sample, required_n_two_sample, tv_upper_bound_two_sample
from speceq.verdicts.decide import (
    CaseDecision,
    CaseEvidence,
    GreedyEvidence,
    decide_run,
    decide_run_pooled,
    run_verdict,
)
from speceq.verdicts.failures import FailureKind, HardFailure
from speceq.verdicts.result import TestOutcome as Outcome  # aliased: pytest would try to collect "Test*"

#: A greedy mismatch record: rows of prompt 0 differ at position 2, where the target's top-2 margin is 2.3 nats.
_MISMATCH = HardFailure(kind=FailureKind.GREEDY_MISMATCH, prompt=0, position=2, token=70, baseline_token=71,
                        prefix=(104, 105, 32, 33), vocab_size=259, margin_nats=2.3, threshold_nats=1e-3, rows=4)


def _test(name: str, p: float, primary: bool = True) -> Outcome:
    return Outcome(name=name, family="two-sample", primary=primary, statistic=1.0, pvalue=p, summary=f"{name} p={p}")


def _case(case_id: str, pvalues: list[float], *, diagnostics: tuple[float, ...] = (), upper: float | None = 0.01,
          k: float = 10.0, n: int = 1000, hard: tuple[HardFailure, ...] = (), greedy: GreedyEvidence | None = None
          ) -> CaseEvidence:
    tests = tuple(_test(f"{case_id} t{i}", p) for i, p in enumerate(pvalues))
    tests += tuple(_test(f"{case_id} d{i}", p, primary=False) for i, p in enumerate(diagnostics))
    return CaseEvidence(case_id=case_id, tests=tests, tv_estimate=0.0 if upper is not None else None, tv_upper_bound=upper,
                        effective_support=k, n_baseline=n, n_candidate=n, hard_failures=hard, greedy=greedy)


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


def test_inconclusive_reports_the_sample_size_that_would_decide() -> None:
    cases = [_case("a", [0.3, 0.6], upper=0.2, k=12.0, n=500), _case("b", [0.9, 0.8])]
    d = decide_run(cases, alpha=0.01, tolerance=0.05)[0]
    level = 0.01 / 4  # Bonferroni level of Holm's first step: 4 primary tests in the run
    expected = max(required_n_two_sample(0.05, 12, level), required_n_equivalence_two_sample(0.05, 12.0, 0.01, 0.9))
    assert d.verdict == "inconclusive" and d.required_n == expected
    assert f"about {expected} samples per engine would decide with probability 0.9 (now 500)" in d.reason


def test_required_n_certifies_with_probability_0_9() -> None:
    """At the printed n the TV bound of two samples of the same law falls below the tolerance
    in >= 90 % of runs (before: sized to the mean bound, 0.53-0.93). Law: 60 labels, Dirichlet(0.5);
    k_eff is the upper estimate from a pilot of 300 + 300 samples."""
    from speceq.stats import effective_support_upper, tv_distance

    rng = np.random.default_rng(11)
    p = rng.dirichlet(np.full(60, 0.5))
    alpha, tol = 1e-3, 0.1
    pilot = rng.multinomial(300, p) + rng.multinomial(300, p)
    k_up = effective_support_upper(pilot)
    k_true = float(np.sqrt(p).sum() ** 2)
    assert k_up >= k_true * 0.9  # an upper estimate, not the plug-in (biased low)
    (d,) = decide_run([_case("a", [0.5], upper=0.5, k=k_up, n=300)], alpha=alpha, tolerance=tol)
    n = d.required_n
    reps = 400
    below = 0
    for _ in range(reps):
        a, b = rng.multinomial(n, p), rng.multinomial(n, p)
        below += tv_upper_bound_two_sample(tv_distance(a, b), n, n, alpha) < tol
    rate = below / reps
    assert rate >= 0.9 - 3 * math.sqrt(0.9 * 0.1 / reps), f"P(bound < tolerance) = {rate} at n = {n}"


def _greedy(**kw: float) -> GreedyEvidence:
    base = dict(rows_compared=40, rows_equal=40, mismatches=0, near_ties=0, unexplained=0, differ_rate=0.0,
                tv_upper_bound=0.16, case_rows=40)
    base.update(kw)
    base["case_rows_diverging"] = base["rows_compared"] - base["rows_equal"]
    return GreedyEvidence(near_tie_nats=1e-3, **base)


def test_greedy_cases_are_decided_here() -> None:
    cases = [
        _case("equal", [], upper=0.16, greedy=_greedy()),
        _case("ties", [], upper=0.16, greedy=_greedy(rows_equal=37, near_ties=3, rows_teacher_forced=3)),
        _case("unexplained", [], upper=0.16, greedy=_greedy(rows_equal=38, unexplained=2)),
        _case("mismatch", [], upper=0.16, greedy=_greedy(rows_equal=39, mismatches=1), hard=(_MISMATCH,)),
    ]
    d = decide_run(cases, alpha=0.01, tolerance=0.2)
    assert [x.verdict for x in d] == ["equivalent", "equivalent", "inconclusive", "shifted"]
    assert "equal token for token" in d[0].reason and "near-tie" in d[1].reason
    assert "teacher-forced through the oracle" in d[1].reason and "whole greedy rows" in d[1].reason
    assert "rerun with the oracle" in d[2].reason and d[2].required_n is None
    assert all("0.16" in x.reason for x in d[:2])  # the row-mismatch bound is printed, never 0


def test_greedy_equivalent_needs_the_bound_below_the_tolerance() -> None:
    """Issue #22: three equal greedy rows (bound 1 - 0.001^(1/3) = 0.90) were `equivalent` at tolerance 0.15."""
    few = _greedy(rows_compared=3, rows_equal=3, case_rows=3, tv_upper_bound=1 - 1e-3 ** (1 / 3))
    (d,) = decide_run([_case("few", [], upper=few.tv_upper_bound, greedy=few)], alpha=1e-3, tolerance=0.15)
    assert d.verdict == "inconclusive" and d.required_n == 43  # 1 - 0.001^(1/43) = 0.148 < 0.15
    assert 1 - 1e-3 ** (1 / 43) < 0.15 <= 1 - 1e-3 ** (1 / 42)
    numerics = _greedy(rows_compared=400, rows_equal=320, near_ties=80, case_rows=400, differ_rate=0.2,
                       tv_upper_bound=0.26)
    (d,) = decide_run([_case("bf16", [], upper=0.26, greedy=numerics)], alpha=1e-3, tolerance=0.15)
    assert d.verdict == "inconclusive" and d.required_n is None and "more rows will not certify" in d.reason


def test_equivalent_says_what_it_certifies() -> None:
    (d,) = decide_run([_case("a", [0.5])], alpha=0.01, tolerance=0.05)
    assert d.verdict == "equivalent"
    assert "per-position marginal TV of the case's prompt" in d.reason
    assert "between the baseline's and the candidate's laws of the token (or END)" in d.reason
    assert "companion prompts and dependence beyond the joint test" in d.reason


def test_hard_failure_is_shifted_whatever_the_p_values() -> None:
    zero = HardFailure(kind=FailureKind.ZERO_PROBABILITY, prompt=0, position=1, token=7, prefix=(104, 105),
                       vocab_size=259, row=3)
    (d,) = decide_run([_case("a", [0.9], hard=(zero, _MISMATCH))], alpha=0.01, tolerance=0.05)
    assert d.verdict == "shifted" and d.reason == (
        "hard failure: row 3 (prompt 0) position 1: token 0x07 has probability 0 under the processed target after "
        "'hi' (+1 more)")


def test_run_verdict() -> None:
    def dec(v: str) -> CaseDecision:
        return CaseDecision(case_id=v, verdict=v, reason="", tests=())

    assert run_verdict([dec("equivalent"), dec("shifted"), dec("inconclusive")]) == "shifted"
    assert run_verdict([dec("equivalent"), dec("inconclusive")]) == "inconclusive"
    assert run_verdict([dec("equivalent")]) == "equivalent"
    with pytest.raises(ValueError, match="empty"):
        run_verdict([])


#: FWER checks: a tolerated factor of 1 (Holm's FWER <= alpha is a theorem for these p-values),
#: and as many runs as it takes to fail a decision 2x too liberal with probability >= 0.99.
FWER_ALPHA = 0.05
FWER_RUNS = reps_to_catch(FWER_ALPHA, liberal=2.0, factor=1.0)


def _null_cases_called_shifted(rng: np.random.Generator, shifted_cases: int, null_cases: int) -> bool:
    """One run: ``shifted_cases`` cases whose 3 primary p-values are 1e-12 (truly shifted) and
    ``null_cases`` with 3 independent U(0, 1) p-values each. Whether any null case is called shifted."""
    cases = [_case(f"s{i}", [1e-12] * 3) for i in range(shifted_cases)]
    cases += [_case(f"c{i}", rng.random(3).tolist()) for i in range(null_cases)]
    decisions = decide_run(cases, alpha=FWER_ALPHA, tolerance=0.05)
    assert all(d.verdict == "shifted" for d in decisions[:shifted_cases])
    return any(d.verdict == "shifted" for d in decisions[shifted_cases:])


def _false_shift_runs(shifted_cases: int, seed: int, stop_above: int | None = None) -> int:
    """Runs of FWER_RUNS with a null case called shifted (counting stops once above ``stop_above``)."""
    rng = np.random.default_rng(seed)
    false = 0
    for _ in range(FWER_RUNS):
        false += _null_cases_called_shifted(rng, shifted_cases, 20 - shifted_cases)
        if stop_above is not None and false > stop_above:
            break
    return false


def test_family_wise_error_is_controlled_under_the_null() -> None:
    """Runs of 20 null cases x 3 primary tests with independent U(0,1) p-values: the runs with any
    ``shifted`` case stay within the binomial (1 - 1e-6) quantile at alpha (tolerated factor 1;
    FWER_RUNS = 1 312 runs, so a 2x-liberal decision fails with probability >= 0.99)."""
    false = _false_shift_runs(0, seed=7)
    print(f"family-wise error {false / FWER_RUNS:.4f} over R={FWER_RUNS} at alpha={FWER_ALPHA}")
    assert false <= rejection_limit(FWER_RUNS, FWER_ALPHA, factor=1.0)


def test_family_wise_error_is_controlled_when_some_cases_are_shifted() -> None:
    """Partial null: 10 truly shifted cases (p = 1e-12) and 10 null ones per run. Holm rejects the 30
    shifted tests first and then tests the 30 null ones at alpha / 30 .. alpha, so the chance that a
    null case is called shifted is 1 - (1 - alpha / 30)^30 = 0.0488 <= alpha. BH would control only
    the false discovery rate (its cutoff grows with the 30 true rejections); the global null cannot
    tell the two apart, this run can. Same check and R as above."""
    false = _false_shift_runs(10, seed=8)
    print(f"family-wise error over the null cases {false / FWER_RUNS:.4f} over R={FWER_RUNS} at alpha={FWER_ALPHA}")
    assert false <= rejection_limit(FWER_RUNS, FWER_ALPHA, factor=1.0)


def test_the_partial_null_check_fails_benjamini_hochberg_in_place_of_holm(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted bug: the decision adjusts the primary tests by BH instead of Holm."""
    import speceq.verdicts.decide as decide

    monkeypatch.setattr(decide, "holm", decide.benjamini_hochberg)
    limit = rejection_limit(FWER_RUNS, FWER_ALPHA, factor=1.0)
    assert _false_shift_runs(10, seed=8, stop_above=limit) > limit


@pytest.mark.parametrize(
    ("cases", "kwargs", "message"),
    [
        ([_case("a", [float("nan")])], {}, "case 'a': test 'a t0' has p-value nan"),
        ([_case("a", [0.5]), _case("a", [0.5])], {}, "repeats case ids"),
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


# ----- the PIT-law certificate (opt-in) -----

def _pit_case(case_id: str, pit: float | None, *, upper: float = 0.4, p: float = 0.5, n: int = 700) -> CaseEvidence:
    return CaseEvidence(case_id=case_id, tests=(_test(f"{case_id} t0", p),), tv_estimate=0.2, tv_upper_bound=upper,
                        effective_support=400.0, n_baseline=n, n_candidate=n, pit_law_upper_bound=pit,
                        pit_law_positions=8)


def test_pit_law_certificate_decides_what_the_tv_bound_cannot() -> None:
    from speceq.stats import required_n_pit_law

    cases = [_pit_case("low", 0.12), _pit_case("high", 0.2, n=300), _pit_case("none", None)]
    tv = decide_run(cases, alpha=1e-3, tolerance=0.15)
    assert [d.verdict for d in tv] == ["inconclusive"] * 3  # the TV bound 0.4 certifies nothing
    n_pit = required_n_pit_law(0.15, 8, 1e-3, 0.9)
    assert f"the coarser PIT-law bound is 0.1200 (--certificate pit-law certifies it below 0.15 at about {n_pit}" \
        in tv[0].reason
    assert "PIT-law" not in tv[2].reason
    pit = decide_run(cases, alpha=1e-3, tolerance=0.15, certificate="pit-law")
    assert [d.verdict for d in pit] == ["equivalent", "inconclusive", "inconclusive"]
    assert "PIT-law upper bound 0.1200 < tolerance 0.15" in pit[0].reason
    assert "does not bound the TV between the token laws" in pit[0].reason
    assert "its per-position TV upper bound is 0.4000" in pit[0].reason
    assert pit[1].required_n == n_pit and f"about {n_pit} samples per engine would certify it" in pit[1].reason
    assert "needs the oracle's scores of the candidate" in pit[2].reason


def test_pit_law_certificate_never_overrides_a_rejection() -> None:
    shifted = decide_run([_pit_case("a", 0.01, p=1e-9)], alpha=1e-3, tolerance=0.15, certificate="pit-law")
    assert shifted[0].verdict == "shifted"
    with pytest.raises(ValueError, match="certificate"):
        decide_run([_pit_case("a", 0.01)], alpha=1e-3, tolerance=0.15, certificate="kl")


def test_pooled_tests_join_the_holm_family_and_shift_the_run_only() -> None:
    """A run-level pooled test shares Holm with the cases' tests; when it rejects the run is shifted,
    the cases keep their verdicts; when it does not, nothing changes."""
    cases = [_case("a", [0.01, 0.5]), _case("b", [0.02, 0.6])]
    strong = _test("pooled x comparison", 1e-5)
    decisions, pooled = decide_run_pooled(cases, [strong, _test("pooled y", 0.3, primary=False)], alpha=1e-3,
                                          tolerance=0.05)
    assert [d.verdict for d in decisions] == ["equivalent", "equivalent"]
    # the one pooled primary test holds POOLED_ALPHA_SHARE = 1/2 of the weight, the 4 case tests 1/8 each
    assert pooled.tests[0].adjusted_pvalue == pytest.approx(2e-5)
    assert pooled.tests[1].adjusted_pvalue is None and pooled.tests[1].qvalue is not None
    assert pooled.rejects and "pooled x comparison rejects" in pooled.reason
    assert run_verdict(decisions, pooled) == "shifted" and run_verdict(decisions) == "equivalent"
    # the cases' Holm p-values count the pooled test too: 0.01 x (1/2) / (1/8) once the pooled test is rejected
    weighted = holm(np.array([0.01, 0.5, 0.02, 0.6, 1e-5]), np.array([1.0, 1.0, 1.0, 1.0, 4.0]))
    assert decisions[0].tests[0].adjusted_pvalue == pytest.approx(weighted[0]) == pytest.approx(0.04)
    weak, quiet = decide_run_pooled(cases, [_test("pooled x comparison", 6e-4)], alpha=1e-3, tolerance=0.05)
    assert not quiet.rejects and quiet.reason == "" and run_verdict(weak, quiet) == "equivalent"
    assert decide_run_pooled(cases, [], alpha=1e-3, tolerance=0.05)[0] == decide_run(cases, alpha=1e-3, tolerance=0.05)
    with pytest.raises(TypeError, match="pooled"):
        decide_run_pooled(cases, [0.1], alpha=1e-3, tolerance=0.05)


def test_the_pooled_tests_hold_half_of_alpha_whatever_the_number_of_case_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    """56 case tests and 5 pooled ones (the default job's family): a pooled p of 9e-5 rejects at
    alpha 1e-3 (first step 1e-4 = alpha / 2 / 5), which plain Holm over 61 tests (1.6e-5) would not;
    a case test's first step is alpha / 2 / 56, and an inconclusive case asks for the n of that level."""
    import speceq.verdicts.decide as decide
    from speceq.verdicts.decide import POOLED_ALPHA_SHARE, first_step_levels

    levels: list[float] = []
    detect = decide.required_n_two_sample
    monkeypatch.setattr(decide, "required_n_two_sample", lambda tol, k, level, power: levels.append(level) or detect(
        tol, k, level, power))
    cases = [_case(f"c{i}", [1.0] * 8, upper=0.3) for i in range(7)]
    pooled = [_test("pooled a comparison", 9e-5)] + [_test(f"pooled {x} comparison", 1.0) for x in "bcde"]
    decisions, run = decide_run_pooled(cases, pooled, alpha=1e-3, tolerance=0.05)
    assert POOLED_ALPHA_SHARE == 0.5 and run.rejects
    assert run.tests[0].adjusted_pvalue == pytest.approx(9e-4)
    assert holm(np.array([9e-5] + [1.0] * 60))[0] > 1e-3
    case_level, pooled_level = first_step_levels(1e-3, 56, 5)
    assert case_level == pytest.approx(1e-3 / 2 / 56) and pooled_level == pytest.approx(1e-4)
    assert first_step_levels(1e-3, 56, 0) == (pytest.approx(1e-3 / 56),) * 2
    assert all(d.verdict == "inconclusive" for d in decisions)
    assert levels == [pytest.approx(case_level)] * 7  # each inconclusive case sized at its own first step
    levels.clear()
    decide_run(cases, alpha=1e-3, tolerance=0.05)
    assert levels == [pytest.approx(1e-3 / 56)] * 7


def test_with_pooled_counts_the_sizes_come_from_the_estimated_law() -> None:
    """Evidence with the pooled counts of the bound's position: required_n is samples_for on the
    estimated law (or the chi-square's detection size at that law's bins, whichever is larger),
    and equivalent and inconclusive cases carry min_detectable_tv at their current n."""
    from speceq.stats import estimate_law, min_detectable_tv, samples_for

    p = np.arange(1, 5001, dtype=np.float64) ** -1.1
    p /= p.sum()
    rng = np.random.default_rng(5)
    counts = rng.multinomial(400, p) + rng.multinomial(400, p)
    counts = counts[counts > 0]
    base = dict(tests=(_test("t", 0.5),), tv_estimate=0.1, effective_support=10.0, n_baseline=400, n_candidate=400,
                bound_alpha=1e-3 / 4, pooled_counts=counts, vocabulary=5000, positions=4)
    unsure = CaseEvidence(case_id="a", tv_upper_bound=0.3, **base)
    sure = CaseEvidence(case_id="b", tv_upper_bound=0.05, **base)
    d_unsure, d_sure = decide_run([unsure, sure], alpha=1e-3, tolerance=0.15)
    law = estimate_law(counts, 5000)
    certify = samples_for(0.15, [law] * 4, alpha=1e-3 / 4).n
    level = 1e-3 / 2  # two primary tests in the run
    detect = required_n_two_sample(0.15, min_detectable_tv(certify, law, level=level).bins, level)
    assert d_unsure.verdict == "inconclusive" and d_unsure.required_n == max(certify, detect)
    assert d_unsure.required_n != decide_run([_case("a", [0.5], upper=0.3, k=10.0, n=400)], alpha=1e-3,
                                             tolerance=0.15)[0].required_n
    detectable = min_detectable_tv(400, law, level=level).tv
    assert d_sure.verdict == "equivalent" and d_sure.min_detectable_tv == detectable == d_unsure.min_detectable_tv
    assert 0.0 < detectable < 1.0


def _independence(p: float, *, primary: bool) -> Outcome:
    from speceq.verdicts.kinds import TestKind

    name = "row independence" if primary else "baseline row independence"
    return Outcome(name=name, family="row independence", primary=primary, statistic=5.0, pvalue=p,
                   summary=f"{name}: ... p={p}", kind=TestKind.ROW_INDEPENDENCE, position=0)


def _with(case: CaseEvidence, *tests: Outcome) -> CaseEvidence:
    import dataclasses

    return dataclasses.replace(case, tests=case.tests + tests)


def test_a_dependent_candidate_is_shifted_as_rows_are_not_independent() -> None:
    (d,) = decide_run([_with(_case("a", [0.5]), _independence(1e-9, primary=True))], alpha=1e-3, tolerance=0.05)
    assert d.verdict == "shifted" and d.reason.startswith("rows are not independent: row independence rejects")
    assert "whatever each row's own law" in d.reason


def test_a_token_law_reason_says_when_rows_are_dependent() -> None:
    # a chi-square rejects harder, but the candidate's dependence leads: the chi-square's p-value assumes independence
    (d,) = decide_run([_with(_case("a", [1e-12]), _independence(1e-6, primary=True))], alpha=1e-3, tolerance=0.05)
    assert d.verdict == "shifted" and d.reason.startswith("rows are not independent: row independence rejects")
    assert "; a t0 rejects too (Holm-adjusted p=2e-12), but its p-value assumes independent rows" in d.reason
    # a chi-square decides while only the baseline's rows are dependent: said after the chi-square's reason
    (g,) = decide_run([_with(_case("g", [1e-12]), _independence(0.4, primary=True), _independence(1e-6, primary=False))],
                      alpha=1e-3, tolerance=0.05)
    assert g.verdict == "shifted" and g.reason.startswith("g t0 rejects")
    assert "but the baseline's rows are not independent (baseline row independence: p=1e-06)" in g.reason
    # the baseline's (a diagnostic) never decides, but qualifies an equivalent verdict; first step: 1e-3 / 2
    (e,) = decide_run([_with(_case("b", [0.5]), _independence(0.3, primary=True), _independence(1e-5, primary=False))],
                      alpha=1e-3, tolerance=0.05)
    assert e.verdict == "equivalent"
    assert e.reason.endswith("so they may read shared randomness as a shift")
    assert "the baseline's rows are not independent (baseline row independence: p=1e-05)" in e.reason
    assert "candidate's rows" not in e.reason
    # independent rows: no word about dependence
    (f,) = decide_run([_with(_case("c", [0.5]), _independence(0.3, primary=True), _independence(0.01, primary=False))],
                      alpha=1e-3, tolerance=0.05)
    assert f.verdict == "equivalent" and "independent" not in f.reason


def _untested(rows: int, *, calls: int = 1, batch_size: int = 512, role: str = "candidate"):
    from speceq.verdicts.notes import Note, NoteKind

    return Note(kind=NoteKind.INDEPENDENCE_UNTESTED, values={"role": role, "rows": rows, "calls": 1,
                                                            "sample_calls": calls, "batch_size": batch_size})


def test_a_detected_difference_says_when_the_rows_are_one_forward_batch_of_one_call() -> None:
    """Rows of a single forward batch of a single call cannot be tested for independence: a shift the token-law
    tests detect there may be randomness the rows share, so its reason says the test could not run, with the
    note's numbers (the same words as the case's note)."""
    import dataclasses

    from speceq.verdicts.reasons import note_line

    note = _untested(300)
    one_batch = dataclasses.replace(_case("a", [1e-12]), independence_untested=(note,))
    (d,) = decide_run([one_batch], alpha=1e-3, tolerance=0.05)
    assert d.verdict == "shifted" and d.reason.startswith("a t0 rejects")
    assert d.reason.endswith(f"; {note_line(note)}")
    assert ("the candidate's row independence: not tested: all 300 rows come from a single forward batch "
            "(batch_size 512) of a single sample() call, so there is nothing independent to compare them with") in d.reason
    # not said where nothing was detected (the case's notes say it), nor where the rows were tested
    (e,) = decide_run([dataclasses.replace(_case("b", [0.5]), independence_untested=(note,))], alpha=1e-3,
                      tolerance=0.05)
    assert e.verdict == "equivalent" and "independence" not in e.reason
    (f,) = decide_run([_case("c", [1e-12])], alpha=1e-3, tolerance=0.05)
    assert f.verdict == "shifted" and "independence" not in f.reason
    # a hard failure rests on impossible tokens, not on independent rows
    (h,) = decide_run([dataclasses.replace(_case("h", [0.5], hard=(_MISMATCH,)), independence_untested=(note,))],
                      alpha=1e-3, tolerance=0.05)
    assert h.verdict == "shifted" and "independence" not in h.reason


def test_a_shifted_greedy_case_is_sized_by_its_rows_beyond_a_near_tie() -> None:
    """Issue 46: a greedy ``shifted`` carries the share of row pairs diverging beyond a near-tie, with its
    Clopper-Pearson interval; near-ties are counted apart, and without an oracle no share is guessed."""
    from speceq.stats import clopper_pearson
    from speceq.verdicts.decide import greedy_size

    g = _greedy(rows_equal=30, mismatches=4, near_ties=6, rows_beyond_near_tie=7, rows_off_argmax=3)
    (d,) = decide_run([_case("m", [], upper=0.16, greedy=g, hard=(_MISMATCH,))], alpha=0.01, tolerance=0.2)
    want = clopper_pearson(7, 40, 0.01)
    assert d.verdict == "shifted" and d.size is not None
    assert (d.size.estimate, d.size.low, d.size.high, d.size.level) == (want.estimate, want.low, want.high, want.level)
    assert d.size.unit == "share of row pairs" and "size: 17.5% of the greedy row pairs" in d.reason
    assert "3 more row pairs diverge only at numerical near-ties (not counted)" in d.reason
    assert "held-out" not in d.reason and "TV" not in d.reason.split("size:")[1]
    assert greedy_size(_greedy(rows_equal=38, unexplained=2), 0.01) is None
    (ok,) = decide_run([_case("equal", [], upper=0.16, greedy=_greedy())], alpha=0.01, tolerance=0.2)
    assert ok.verdict == "equivalent" and ok.size is None  # an equivalent greedy case has a bound, no size
