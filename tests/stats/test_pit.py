"""Randomized PIT and the uniformity tests, including the Anderson-Darling p-value."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from speceq.stats import (
    anderson_darling_uniform_sf,
    anderson_darling_uniform_statistic,
    pit_uniformity,
    randomized_pit,
)
from speceq.stats.synthetic import random_target_probs, sample_categorical, scores_from_probs, tempered


def _imhof_sf(z: float, terms: int = 4000) -> float:
    """P(sum_j Z_j^2 / (j (j+1)) > z) by Imhof's inversion: the exact limiting AD law."""
    j = np.arange(1, terms + 1, dtype=np.float64)
    lam = 1.0 / (j * (j + 1.0))

    def integrand(v: float) -> float:
        theta = 0.5 * np.sum(np.arctan(lam * v)) - 0.5 * z * v
        rho = np.exp(0.25 * np.sum(np.log1p((lam * v) ** 2)))
        return math.sin(theta) / (v * rho)

    value = integrate.quad(integrand, 0, np.inf, limit=1000, epsabs=1e-13, epsrel=1e-10)[0]
    return 0.5 + value / math.pi


def test_pit_formula() -> None:
    probs = np.array([[0.6, 0.3, 0.1], [0.2, 0.2, 0.6]])
    scores = scores_from_probs(probs, np.array([1, 1]))
    # row 0: order (0, 1, 2), token 1 -> F- = 0.6; row 1: order (2, 0, 1), token 1 -> F- = 0.8
    assert scores.cdf_before.tolist() == pytest.approx([0.6, 0.8])
    v = np.random.default_rng(0).random(2)
    u = randomized_pit(scores, np.random.default_rng(0))
    assert u.tolist() == pytest.approx([0.6 + 0.3 * v[0], 0.8 + 0.2 * v[1]])


def test_uniformity_tests_match_scipy() -> None:
    u = np.random.default_rng(1).random(500)
    res = pit_uniformity(u)
    ks, cvm = stats.kstest(u, "uniform"), stats.cramervonmises(u, "uniform")
    assert (res.ks.statistic, res.ks.pvalue) == pytest.approx((ks.statistic, ks.pvalue))
    assert (res.cramervonmises.statistic, res.cramervonmises.pvalue) == pytest.approx((cvm.statistic, cvm.pvalue))
    assert sum(res.histogram) == 500 and len(res.histogram) == 20
    ref = stats.chisquare(np.histogram(u, bins=20, range=(0, 1))[0])
    assert (res.histogram_chi2.statistic, res.histogram_chi2.pvalue) == pytest.approx((ref.statistic, ref.pvalue))


def test_anderson_darling_statistic_matches_scipy_goodness_of_fit() -> None:
    u = np.random.default_rng(2).random(300)
    ref = stats.goodness_of_fit(
        stats.uniform, u, known_params={"loc": 0.0, "scale": 1.0}, statistic="ad", n_mc_samples=9, rng=np.random.default_rng(0)
    )
    assert anderson_darling_uniform_statistic(u) == pytest.approx(ref.statistic, rel=1e-10)


def test_anderson_darling_critical_values() -> None:
    """Asymptotic 5% and 1% points of the limiting law: 2.4921 and 3.8779 (Imhof inversion;
    3.878 in Lewis 1961 / Marsaglia 2004). The often-quoted 1% point 3.857 (Stephens 1974)
    has an exact limiting p of 0.01024."""
    assert anderson_darling_uniform_sf(2.4921) == pytest.approx(0.05, abs=2e-5)
    assert anderson_darling_uniform_sf(3.8779) == pytest.approx(0.01, abs=2e-5)
    assert anderson_darling_uniform_sf(3.857) == pytest.approx(0.01024, abs=2e-5)


@pytest.mark.parametrize("z", [1.0, 3.0, 5.0, 9.0, 14.0])
def test_anderson_darling_sf_matches_the_exact_limiting_law(z: float) -> None:
    assert anderson_darling_uniform_sf(z) == pytest.approx(_imhof_sf(z), rel=2e-3)


def test_anderson_darling_sf_is_monotone_and_continuous_at_the_switch() -> None:
    z = np.linspace(0.05, 40, 4000)
    p = np.array([anderson_darling_uniform_sf(x, 1000) for x in z])
    assert np.all(np.diff(p) <= 0) and p[0] <= 1.0 and p[-1] > 0
    assert anderson_darling_uniform_sf(4.0 - 1e-9, 1000) == pytest.approx(anderson_darling_uniform_sf(4.0, 1000), rel=2e-3)


def test_anderson_darling_finite_n_calibration() -> None:
    """Rejection rates of the AD p-value for n = 20 uniforms, R = 4000, at 5% and 1%."""
    reps, n = 4000, 20
    u = np.random.default_rng(3).random((reps, n))
    p = np.array([anderson_darling_uniform_sf(anderson_darling_uniform_statistic(row), n) for row in u])
    for alpha in (0.05, 0.01):
        rate = np.mean(p <= alpha)
        print(f"AD n={n}: rejection rate {rate:.4f} at alpha={alpha} over R={reps}")
        assert abs(rate - alpha) <= 3 * math.sqrt(alpha * (1 - alpha) / reps)


def test_temperature_shift_is_detected_by_every_pit_test() -> None:
    rng = np.random.default_rng(4)
    probs = random_target_probs(rng, 3000, 30)
    tokens = sample_categorical(tempered(probs, 1.3), rng)
    res = pit_uniformity(randomized_pit(scores_from_probs(probs, tokens), rng))
    assert all(t.pvalue < 1e-4 for t in res.tests()), res.summary()


def test_histogram_test_uses_fewer_bins_for_small_n() -> None:
    res = pit_uniformity(np.linspace(0.01, 0.99, 30))
    assert len(res.histogram) == 20 and res.histogram_chi2.dof == 5


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: pit_uniformity(np.array([0.5, 1.5])), "`u` must lie"),
        (lambda: pit_uniformity(np.array([0.5])), "at least 2"),
        (lambda: pit_uniformity(np.array([1, 0])), "`u` must be a 1-D float"),
        (lambda: pit_uniformity(np.array([0.1, 0.2]), bins=1), "`bins`"),
        (lambda: randomized_pit(np.array([0.1]), np.random.default_rng(0)), "`scores`"),
        (lambda: anderson_darling_uniform_sf(-1.0), "`statistic`"),
    ],
)
def test_invalid_input_names_the_parameter(call, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        call()
