"""Chi-square goodness of fit with bins from p."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from speceq.stats import chisquare_gof, probability_bins, tv_to_oracle


def test_matches_scipy_chisquare_when_no_merge() -> None:
    p = np.array([0.4, 0.3, 0.2, 0.1])
    counts = np.random.default_rng(0).multinomial(500, p)
    res = chisquare_gof(counts, p)
    ref = stats.chisquare(counts, f_exp=500 * p)
    assert (res.statistic, res.pvalue, res.dof) == (pytest.approx(ref.statistic), pytest.approx(ref.pvalue), 3)


def test_tail_is_grouped_by_p_and_kept_as_its_own_bin() -> None:
    p = np.array([0.5, 0.3, 0.1, 0.06, 0.04])
    # n = 200, min 20: expected 100, 60, 20, 12, 8 -> bins {0}, {1}, {2}, tail {3, 4} (expected 20)
    assert probability_bins(p, 200).tolist() == [0, 1, 2, 3, 3]
    # n = 50: expected 25, 15, 5, 3, 2 -> {0} and the tail {1..4} (expected 25)
    assert probability_bins(p, 50).tolist() == [0, 1, 1, 1, 1]
    # min 5 at n = 50: expected 25, 15, 5 own bins; tail {3, 4} (5) own bin
    assert probability_bins(p, 50, min_expected=5).tolist() == [0, 1, 2, 3, 3]
    # a long tail is cut into bins of expected count in [min, 3 min)
    flat = np.full(100, 0.01)
    bins = probability_bins(flat, 1000, min_expected=20)  # each label expects 10
    sizes = np.bincount(bins) * 10.0
    assert sizes.min() >= 20 and sizes.max() < 60
    counts = np.array([96, 64, 20, 12, 8])
    ref = stats.chisquare([96, 64, 20, 20], f_exp=[100, 60, 20, 20])
    res = chisquare_gof(counts, p)
    assert res.n_bins == 4 and res.method == "asymptotic" and res.statistic == pytest.approx(ref.statistic)
    assert res.tv == pytest.approx(tv_to_oracle(counts, p))


def test_a_sample_on_the_tail_is_never_folded_away() -> None:
    """Before: top-1 0.99 and all 150 draws on the second token folded into one bin, p = 1."""
    p = np.zeros(50)
    p[0], p[1:] = 0.99, 0.01 / 49
    counts = np.zeros(50, dtype=np.int64)
    counts[1] = 150
    res = chisquare_gof(counts, p, mc_level=2e-5, rng=np.random.default_rng(0))
    assert res.n_bins == 2 and res.method == "exact"
    assert res.pvalue == pytest.approx(0.01**150, rel=1e-6)  # all 150 draws in a tail of mass 0.01
    statistic, pvalue = res
    assert (statistic, pvalue) == (res.statistic, res.pvalue)


def test_two_bins_use_the_exact_binomial_p_in_the_tail() -> None:
    """2 bins expecting 2970 and 30: the chi-square p is 2x too small at 1e-3 (skewed tail)."""
    p = np.array([0.99, 0.01])
    res = chisquare_gof(np.array([2952, 48]), p)
    exact = stats.binom.cdf(12, 3000, 0.01) + stats.binom.sf(47, 3000, 0.01)  # tail <= 12 or >= 48
    assert res.method == "exact" and res.pvalue == pytest.approx(exact, rel=1e-9)
    assert res.pvalue > 1.5 * stats.chi2.sf(res.statistic, 1)
    assert chisquare_gof(np.array([2975, 25]), p).method == "asymptotic"  # large p: chi-square law kept


def test_monte_carlo_p_under_the_known_law_is_valid_and_stops_early() -> None:
    p = np.array([0.6, 0.3, 0.1])  # n = 100: bins expect 60, 30 and 10 (< 20)
    rng = np.random.default_rng(5)
    ps = np.array([chisquare_gof(rng.multinomial(100, p), p, rng=rng).pvalue for _ in range(400)])
    assert (ps <= 0.05).mean() <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 400)
    res = chisquare_gof(np.array([60, 30, 10]), p, mc_level=1e-6)
    assert res.method == "monte-carlo" and res.mc_samples < 1000  # a large p stops after 20 exceedances


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.floats(0.0, 1.0), min_size=2, max_size=12), st.integers(1, 300), st.data())
def test_bins_are_a_function_of_p_and_n_only(weights: list[float], n: int, data: st.DataObject) -> None:
    w = np.array(weights)
    if w.sum() <= 0:
        return
    p = w / w.sum()
    counts = np.array(data.draw(st.lists(st.integers(0, n), min_size=p.size, max_size=p.size)))
    counts[np.argmax(p)] += 1  # at least one observation
    bins = probability_bins(p, int(counts.sum()))
    assert np.all(bins[p == 0] == -1) and np.all(bins[p > 0] >= 0)
    res = chisquare_gof(counts, p)
    assert res.n_bins == (bins.max() + 1 if (bins >= 0).any() else 0)
    assert res.tv_upper_bound >= res.tv


def test_support_violation_gives_p_zero() -> None:
    res = chisquare_gof(np.array([10, 5, 1]), np.array([0.6, 0.4, 0.0]))
    assert res.support_violations == 1 and res.pvalue == 0.0 and res.statistic == np.inf


def test_detects_a_shift() -> None:
    p = np.array([0.5, 0.25, 0.15, 0.1])
    q = np.array([0.42, 0.3, 0.18, 0.1])
    res = chisquare_gof(np.random.default_rng(1).multinomial(2000, q), p, mc_level=2e-5)
    assert res.method == "monte-carlo" and res.pvalue < 2e-5  # resolved at the Holm level


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: chisquare_gof([1, 2], [0.5, 0.6]), "`probs` sums"),
        (lambda: chisquare_gof([1, 2], [1.0]), "`probs` has length"),
        (lambda: chisquare_gof([0, 0], [0.5, 0.5]), "at least one"),
        (lambda: chisquare_gof([1, 2], [0.5, 0.5], min_expected=0), "`min_expected`"),
        (lambda: probability_bins([0.5, 0.5], 0), "`n`"),
    ],
)
def test_invalid_input_names_the_parameter(call, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        call()
