"""Two-sample tests of sequence scalars: KS with random tie-breaking, CvM by permutation."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from speceq.stats import cramervonmises_2samp_permutation, ks_2samp_jittered


def test_ks_equals_scipy_on_continuous_data() -> None:
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=150), rng.normal(0.2, size=170)
    res = ks_2samp_jittered(x, y, np.random.default_rng(1))
    ref = stats.ks_2samp(x, y)
    assert res.statistic == pytest.approx(ref.statistic)
    assert res.pvalue == pytest.approx(ref.pvalue)


def test_ks_breaks_ties_but_keeps_distinct_values_ordered() -> None:
    x = np.array([1, 1, 1, 2, 2, 3])
    y = np.array([3, 3, 3, 2, 1, 3])
    res = ks_2samp_jittered(x, y, np.random.default_rng(2))
    tied = stats.ks_2samp(x, y).statistic  # distance of the step functions, 0.5 here
    assert abs(res.statistic - tied) <= 1 / 6 + 1e-12 and 0 < res.pvalue <= 1


def test_cvm_statistic_matches_scipy_with_ties() -> None:
    rng = np.random.default_rng(3)
    x = rng.poisson(3, size=40).astype(float)
    y = rng.poisson(3.5, size=55).astype(float)
    res = cramervonmises_2samp_permutation(x, y, np.random.default_rng(4), n_resamples=99)
    assert res.statistic == pytest.approx(stats.cramervonmises_2samp(x, y).statistic, rel=1e-12)
    assert res.n_resamples == 99 and res.pvalue * 100 == pytest.approx(round(res.pvalue * 100))


def test_cvm_permutation_p_close_to_scipy_asymptotic_on_continuous_data() -> None:
    rng = np.random.default_rng(5)
    x, y = rng.normal(size=200), rng.normal(0.15, size=250)
    res = cramervonmises_2samp_permutation(x, y, np.random.default_rng(6), n_resamples=1999)
    assert res.pvalue == pytest.approx(stats.cramervonmises_2samp(x, y).pvalue, abs=0.03)


def test_length_shift_is_detected() -> None:
    rng = np.random.default_rng(7)
    x = np.minimum(rng.geometric(0.10, size=400), 32)
    y = np.minimum(rng.geometric(0.14, size=400), 32)
    assert ks_2samp_jittered(x, y, rng).pvalue < 1e-4
    assert cramervonmises_2samp_permutation(x, y, rng, n_resamples=999).pvalue == pytest.approx(1 / 1000)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: ks_2samp_jittered([1.0, np.inf], [1.0], np.random.default_rng(0)), "`x` must be finite"),
        (lambda: ks_2samp_jittered([1.0], [], np.random.default_rng(0)), "`y`"),
        (lambda: ks_2samp_jittered([1.0], [2.0], 0), "`rng`"),
        (lambda: cramervonmises_2samp_permutation([1.0], [2.0, 3.0], np.random.default_rng(0)), "at least 2"),
        (lambda: cramervonmises_2samp_permutation([1.0, 2], [2.0, 3.0], np.random.default_rng(0), 0), "`n_resamples`"),
    ],
)
def test_invalid_input_names_the_parameter(call, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        call()


def test_both_relabelling_paths_compute_the_same_statistic() -> None:
    """The tie-group-count path and the label-vector path of the CvM permutation agree."""
    from speceq.stats.sequence import _cvm_u_counts, _cvm_u_labels

    rng = np.random.default_rng(8)
    pooled = rng.integers(0, 7, size=60).astype(float)
    values, group, sizes = np.unique(pooled, return_inverse=True, return_counts=True)
    midranks = np.cumsum(sizes) - (sizes - 1) / 2.0
    order = np.argsort(group, kind="stable")
    for _ in range(20):
        in_x = np.zeros(60, dtype=bool)
        in_x[rng.choice(60, size=25, replace=False)] = True
        counts = np.bincount(group[in_x], minlength=values.size)
        by_labels = _cvm_u_labels(in_x[order], np.repeat(midranks, sizes), 25, 35)
        assert _cvm_u_counts(counts, sizes, midranks, 25, 35) == pytest.approx(by_labels, rel=1e-12)
        x, y = pooled[in_x], pooled[~in_x]
        t = by_labels / (25 * 35 * 60) - (4 * 25 * 35 - 1) / (6 * 60)
        assert t == pytest.approx(stats.cramervonmises_2samp(x, y).statistic, rel=1e-12)
