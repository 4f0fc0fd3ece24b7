"""clopper_pearson: exact values, edges, input errors and coverage measured exactly (no sampling)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from speceq.stats import ProportionInterval, clopper_pearson


def test_known_values():
    r = clopper_pearson(5, 10, 0.05)  # the textbook interval of 5 of 10 at 95 %
    assert isinstance(r, ProportionInterval)
    assert r.estimate == 0.5 and r.level == pytest.approx(0.95)
    assert r.low == pytest.approx(0.187086, abs=1e-6) and r.high == pytest.approx(0.812914, abs=1e-6)


def test_edges_are_exact():
    none = clopper_pearson(0, 10, 0.05)
    assert none.low == 0.0 and none.high == pytest.approx(1 - 0.025 ** (1 / 10))
    every = clopper_pearson(10, 10, 0.05)
    assert every.high == 1.0 and every.low == pytest.approx(0.025 ** (1 / 10))
    assert every.to_dict()["successes"] == 10 and "10 of 10" in every.summary()


@pytest.mark.parametrize(("k", "n", "alpha", "match"), [
    (11, 10, 0.05, "exceeds"), (-1, 10, 0.05, ">= 0"), (0, 0, 0.05, ">= 1"), (1, 10, 1.0, r"\(0, 1\)"),
])
def test_bad_input_is_named(k, n, alpha, match):
    with pytest.raises(ValueError, match=match):
        clopper_pearson(k, n, alpha)


def test_counts_must_be_integers():
    with pytest.raises(TypeError, match="successes"):
        clopper_pearson(1.5, 10, 0.05)


def _coverage(pmf: np.ndarray, rate: float, n: int, alpha: float) -> float:
    """P(interval covers rate) for a law of the success count."""
    cover = [clopper_pearson(k, n, alpha) for k in range(n + 1)]
    return float(sum(p for p, c in zip(pmf, cover) if c.low <= rate <= c.high))


@pytest.mark.parametrize("alpha", [0.05, 0.001])
def test_coverage_of_one_rate_is_at_least_the_level(alpha):
    n = 40
    for rate in np.linspace(0.005, 0.995, 67):
        assert _coverage(sps.binom.pmf(np.arange(n + 1), n, rate), rate, n, alpha) >= 1 - alpha - 1e-12


@pytest.mark.parametrize("alpha", [0.05, 0.001])
def test_coverage_of_the_mean_rate_of_mixed_trials(alpha):
    """Row pairs of prompts that diverge at different rates: the interval covers their mean rate."""
    n = 40
    rng = np.random.default_rng(3)
    for _ in range(60):
        groups = rng.integers(1, 5)
        rates = np.repeat(rng.uniform(0, 1, groups) ** rng.choice([1, 4]), n // groups + 1)[:n]
        pmf = np.array([1.0])
        for p in rates:  # the Poisson-binomial law of the sum, exactly
            pmf = np.convolve(pmf, [1 - p, p])
        assert _coverage(pmf, float(rates.mean()), n, alpha) >= 1 - alpha - 1e-12
