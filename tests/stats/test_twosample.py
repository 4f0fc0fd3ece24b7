"""Chi-square homogeneity with pooled-count binning."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from speceq.stats import chisquare_homogeneity, pooled_bins, tv_distance


def test_matches_scipy_chi2_contingency_without_yates() -> None:
    rng = np.random.default_rng(1)
    a = rng.multinomial(800, [0.4, 0.3, 0.2, 0.1])
    b = rng.multinomial(600, [0.35, 0.3, 0.2, 0.15])
    res = chisquare_homogeneity(a, b)
    ref = stats.chi2_contingency(np.vstack([a, b]), correction=False)
    assert res.method == "asymptotic"
    assert res.statistic == pytest.approx(ref.statistic, rel=1e-12)
    assert res.pvalue == pytest.approx(ref.pvalue, rel=1e-9)
    assert res.dof == ref.dof == 3


def test_dof_one_is_not_yates_corrected() -> None:
    a, b = np.array([60, 40]), np.array([45, 55])
    res = chisquare_homogeneity(a, b)
    assert res.statistic == pytest.approx(stats.chi2_contingency(np.vstack([a, b]), correction=False).statistic)
    assert res.statistic > stats.chi2_contingency(np.vstack([a, b])).statistic


def test_rare_labels_merge_by_pooled_count() -> None:
    a = np.array([50, 40, 3, 0, 2, 0])
    b = np.array([45, 50, 4, 1, 0, 0])
    # pooled: 95, 90, 7, 1, 2, 0 -> kept {0, 1}; merged {2, 3, 4} (10 >= 10); label 5 unseen
    assert pooled_bins(a + b, 10).tolist() == [0, 1, 2, 2, 2, -1]
    # with the group sizes the rule is pooled >= 5 * 195 / 95 = 10.3: the merged bin (10) is
    # below it and folds into the smallest kept bin (label 1)
    assert pooled_bins(a + b, 10, n_a=95, n_b=100).tolist() == [0, 1, 1, 1, 1, -1]
    res = chisquare_homogeneity(a, b, min_pooled=10)
    ref = stats.chi2_contingency(np.vstack([[50, 45], [45, 55]]), correction=False)
    assert (res.n_bins, res.merged_labels, res.dof, res.method) == (2, 4, 1, "asymptotic")
    assert res.statistic == pytest.approx(ref.statistic)
    assert res.tv == pytest.approx(tv_distance(a, b))  # TV on the unmerged labels


def test_issue_reproduction_a_tiny_merged_bin_no_longer_forces_monte_carlo() -> None:
    """Before: p = 1e-4 (Monte Carlo with 9999 tables) for a TV 0.17 shift; Holm needs ~2e-5."""
    a, b = np.array([2910, 80, 9, 1]), np.array([2400, 590, 10, 0])
    res = chisquare_homogeneity(a, b)
    assert res.method == "asymptotic" and res.pvalue < 1e-80
    assert res.tv == pytest.approx(0.17, abs=0.001)


def test_unequal_groups_meet_cochran_after_binning() -> None:
    rng = np.random.default_rng(7)
    p = rng.dirichlet(np.full(40, 0.3))
    for _ in range(20):
        res = chisquare_homogeneity(rng.multinomial(3000, p), rng.multinomial(600, p))
        assert res.method in ("asymptotic", "degenerate")


def test_sparse_table_uses_monte_carlo_with_fixed_margins() -> None:
    a = np.array([6, 1, 1, 0])
    b = np.array([2, 3, 4, 5])
    res = chisquare_homogeneity(a, b, min_pooled=1, rng=np.random.default_rng(3), mc_samples=4999, mc_stop_after=None)
    assert res.method == "monte-carlo" and res.mc_samples == 4999
    # the MC p estimates the exact conditional p; compare with scipy's permutation p
    ref = stats.chi2_contingency(
        np.vstack([a, b]), correction=False,
        method=stats.PermutationMethod(n_resamples=4999, rng=np.random.default_rng(4)),
    )
    assert res.pvalue == pytest.approx(ref.pvalue, abs=0.015)
    assert res.pvalue * 5000 == pytest.approx(round(res.pvalue * 5000))  # (1 + #) / (B + 1)


def test_monte_carlo_is_sized_to_the_level_it_is_compared_at() -> None:
    """A small table far from H0: 9999 tables floor p at 1e-4; 20 / level tables resolve 2e-5."""
    a, b = np.array([10, 0, 0, 0]), np.array([0, 5, 3, 3])  # no label meets the rule: unmerged, Monte Carlo
    fixed = chisquare_homogeneity(a, b)
    assert fixed.method == "monte-carlo" and fixed.pvalue >= 1e-4
    sized = chisquare_homogeneity(a, b, mc_level=2e-5)
    assert sized.mc_samples >= 1_000_000 and sized.pvalue < 2e-5


def test_sequential_monte_carlo_stops_early_when_p_is_large() -> None:
    a, b = np.array([3, 3, 2, 1]), np.array([3, 2, 3, 2])
    res = chisquare_homogeneity(a, b, mc_level=1e-6)
    assert res.method == "monte-carlo" and res.pvalue > 0.3 and res.mc_samples < 200


def test_monte_carlo_agrees_with_asymptotic_on_a_large_table() -> None:
    rng = np.random.default_rng(2)
    a = rng.multinomial(3000, np.full(8, 1 / 8))
    b = rng.multinomial(3000, np.full(8, 1 / 8))
    asym = chisquare_homogeneity(a, b, method="asymptotic")
    mc = chisquare_homogeneity(a, b, method="monte-carlo", rng=np.random.default_rng(5), mc_samples=4999)
    assert mc.statistic == asym.statistic
    assert mc.pvalue == pytest.approx(asym.pvalue, abs=0.02)


def test_rng_none_is_reproducible() -> None:
    a, b = np.array([3, 0, 1]), np.array([0, 4, 1])
    r1 = chisquare_homogeneity(a, b, min_pooled=1, mc_samples=499)
    r2 = chisquare_homogeneity(a, b, min_pooled=1, mc_samples=499)
    assert (r1.statistic, r1.pvalue) == tuple(r1)
    assert r1.method == "monte-carlo" and r1.pvalue == r2.pvalue


def test_degenerate_single_bin() -> None:
    res = chisquare_homogeneity(np.array([5, 0, 0]), np.array([7, 0, 0]))
    assert (res.method, res.pvalue, res.dof, res.statistic) == ("degenerate", 1.0, 0, 0.0)


def test_detects_a_shift_of_the_top_token() -> None:
    rng = np.random.default_rng(8)
    p = np.array([0.5, 0.2, 0.1, 0.1, 0.05, 0.05])
    q = p + np.array([-0.08, 0.02, 0.02, 0.02, 0.01, 0.01])  # TV = 0.08
    res = chisquare_homogeneity(rng.multinomial(3000, p), rng.multinomial(3000, q))
    assert res.pvalue < 1e-3 and res.largest_cells[0] == 0  # noncentrality ~40 on 5 dof: power > 0.99
    assert res.tv_upper_bound >= res.tv


table = st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), min_size=2, max_size=15)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(table, st.data())
def test_bins_depend_on_pooled_counts_only(cells: list[tuple[int, int]], data: st.DataObject) -> None:
    """Swapping group labels, or moving counts between groups at fixed pooled counts,
    leaves the bins unchanged; relabelling tokens permutes nothing but the order."""
    a = np.array([c[0] for c in cells])
    b = np.array([c[1] for c in cells])
    if a.sum() == 0 or b.sum() == 0:
        return
    m = data.draw(st.integers(1, 15))
    fwd = chisquare_homogeneity(a, b, min_pooled=m, method="asymptotic")
    rev = chisquare_homogeneity(b, a, min_pooled=m, method="asymptotic")
    assert (fwd.n_bins, fwd.merged_labels) == (rev.n_bins, rev.merged_labels)
    assert fwd.statistic == pytest.approx(rev.statistic, rel=1e-9, abs=1e-12)
    assert fwd.pvalue == pytest.approx(rev.pvalue, rel=1e-9, abs=1e-12)
    # another split of the same pooled counts gives the same bins
    other_a = np.array([data.draw(st.integers(0, int(x + y))) for x, y in zip(a, b)])
    assert pooled_bins(other_a + (a + b - other_a), m).tolist() == pooled_bins(a + b, m).tolist()
    perm = np.array(data.draw(st.permutations(range(len(cells)))))
    shuffled = chisquare_homogeneity(a[perm], b[perm], min_pooled=m, method="asymptotic")
    assert shuffled.statistic == pytest.approx(fwd.statistic, rel=1e-9, abs=1e-12)
    assert shuffled.tv == pytest.approx(fwd.tv, abs=1e-12)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(counts_a=[1, 2], counts_b=[1]), "aligned"),
        (dict(counts_a=[0, 0], counts_b=[1, 1]), "at least one observation"),
        (dict(counts_a=[1.5, 2], counts_b=[1, 1]), "`counts_a`"),
        (dict(counts_a=[1, 2], counts_b=[1, 1], min_pooled=0), "`min_pooled`"),
        (dict(counts_a=[1, 2], counts_b=[1, 1], method="exact"), "`method`"),
        (dict(counts_a=[1, 2], counts_b=[1, 1], rng=3), "`rng`"),
        (dict(counts_a=[1, 2], counts_b=[1, 1], mc_samples=0), "`mc_samples`"),
    ],
)
def test_invalid_input_names_the_parameter(kwargs: dict, message: str) -> None:
    a, b = kwargs.pop("counts_a"), kwargs.pop("counts_b")
    with pytest.raises((ValueError, TypeError), match=message):
        chisquare_homogeneity(a, b, **kwargs)


def _exact_two_bin_pvalue(n_a: int, n_b: int, m2: int, b2: int) -> float:
    """Conditional (hypergeometric) p-value of a 2-bin table, ordered as Pearson's X^2 is: |b2 - e|."""
    k = np.arange(m2 + 1)
    e = m2 * n_b / (n_a + n_b)
    pmf = stats.hypergeom.pmf(k, n_a + n_b, m2, n_b)
    return float(pmf[np.abs(k - e) >= abs(b2 - e) - 1e-9].sum())


def test_unequal_groups_tail_uses_the_conditional_p_value_not_the_too_light_chi2_tail() -> None:
    """3000 + 600, a bin expecting 5 in the small group holds 15 there: chi-square p 8.7e-7, exact 2.4e-5.

    Before: the chi-square p (8.7e-7) rejected at the Holm level 2e-5 although the exact
    conditional p-value is above it.
    """
    n_a, n_b, m2, b2 = 3000, 600, 30, 15
    a, b = np.array([n_a - (m2 - b2), m2 - b2]), np.array([n_b - b2, b2])
    exact = _exact_two_bin_pvalue(n_a, n_b, m2, b2)
    asymptotic = chisquare_homogeneity(a, b, method="asymptotic").pvalue
    assert asymptotic < 1e-6 < 2e-5 < exact
    res = chisquare_homogeneity(a, b, mc_level=2e-5)
    assert res.method == "monte-carlo" and res.mc_samples is not None
    assert 0.5 * exact < res.pvalue < 2.0 * exact and res.pvalue > 10 * asymptotic


def test_unequal_groups_keep_the_chi2_p_where_it_is_accurate_or_overwhelming() -> None:
    n_a, n_b, m2 = 3000, 600, 30
    for b2, method in ((9, "asymptotic"), (13, "monte-carlo"), (25, "asymptotic")):  # p 0.07 / 8e-5 / ~1e-25
        a, b = np.array([n_a - (m2 - b2), m2 - b2]), np.array([n_b - b2, b2])
        assert chisquare_homogeneity(a, b, mc_level=1e-4).method == method, b2
    # equal groups stay asymptotic in the tail (their chi-square tail is accurate: docs/measurements/calibration.md)
    a, b = np.array([985, 15]), np.array([1000, 0])
    assert chisquare_homogeneity(a, b, mc_level=1e-4).method == "asymptotic"


def test_unequal_groups_tail_p_value_is_close_to_exact_on_two_bins() -> None:
    n_a, n_b, m2 = 3000, 600, 60
    for b2 in (0, 20, 22):
        a, b = np.array([n_a - (m2 - b2), m2 - b2]), np.array([n_b - b2, b2])
        res = chisquare_homogeneity(a, b, mc_level=1e-4, rng=np.random.default_rng(b2))
        exact = _exact_two_bin_pvalue(n_a, n_b, m2, b2)
        assert res.method == "monte-carlo" and res.pvalue == pytest.approx(exact, rel=0.5), b2
