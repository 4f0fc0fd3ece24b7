"""Sample-size formulas: published tables of the noncentral chi-square and a power simulation."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from speceq.stats import (
    noncentrality_for_power,
    required_n_equivalence_oracle,
    required_n_equivalence_two_sample,
    required_n_oracle,
    required_n_two_sample,
)

# Detection: alpha = 0.01, power 0.9; (k, lambda, {delta: (one-sample, per group)}).
POWER_TABLE = [
    (10, 26.1, {0.01: (65e3, 131e3), 0.02: (16e3, 33e3), 0.05: (2.6e3, 5.2e3)}),
    (100, 62.1, {0.01: (155e3, 311e3), 0.02: (39e3, 78e3), 0.05: (6.2e3, 12e3)}),
    (1000, 172.9, {0.01: (432e3, 864e3), 0.02: (108e3, 216e3), 0.05: (17e3, 35e3)}),
]


@pytest.mark.parametrize(("k", "lam", "sizes"), POWER_TABLE)
def test_reproduces_power_table(k: int, lam: float, sizes: dict[float, tuple[float, float]]) -> None:
    assert noncentrality_for_power(k - 1, 0.01, 0.9) == pytest.approx(lam, abs=0.05)
    for delta, (one, two) in sizes.items():
        # the table rounds to 2-3 significant digits
        assert required_n_oracle(delta, k, 0.01) == pytest.approx(one, rel=0.04)
        assert required_n_two_sample(delta, k, 0.01) == pytest.approx(two, rel=0.04)


# Certification: 95% bound, samples at which the MEAN bound reaches eps when p = q (oracle / per group).
CERT_TABLE = [
    (10, {0.05: (2.5e3, 4.9e3), 0.02: (15e3, 31e3), 0.01: (62e3, 124e3)}),
    (100, {0.05: (11e3, 22e3), 0.02: (68e3, 136e3), 0.01: (272e3, 544e3)}),
    (1000, {0.05: (77e3, 153e3), 0.02: (479e3, 958e3), 0.01: (1.9e6, 3.8e6)}),
]


@pytest.mark.parametrize(("k", "sizes"), CERT_TABLE)
def test_reproduces_certification_table(k: int, sizes: dict[float, tuple[float, float]]) -> None:
    for eps, (one, two) in sizes.items():
        assert required_n_equivalence_oracle(eps, k, 0.05, probability=0.5) == pytest.approx(one, rel=0.03)
        assert required_n_equivalence_two_sample(eps, k, 0.05, probability=0.5) == pytest.approx(two, rel=0.03)
        # the default sizes to the 0.9 quantile of the bound: strictly more samples
        assert required_n_equivalence_two_sample(eps, k, 0.05) > required_n_equivalence_two_sample(
            eps, k, 0.05, probability=0.5)


def test_noncentrality_gives_the_power() -> None:
    lam = noncentrality_for_power(19, 0.001, 0.8)
    assert stats.ncx2.sf(stats.chi2.isf(0.001, 19), 19, lam) == pytest.approx(0.8, abs=1e-8)


def test_required_n_gives_power_on_the_worst_case_shift() -> None:
    """Simulated power of the chi-square GOF at the required n for the proportional shift."""
    k, delta, alpha = 10, 0.05, 0.01
    n = required_n_oracle(delta, k, alpha)
    p = np.full(k, 1 / k)
    q = p + delta * np.where(np.arange(k) < k // 2, 1, -1) * (2 / k)  # |q-p| prop. to p, TV = delta
    assert 0.5 * np.abs(q - p).sum() == pytest.approx(delta)
    rng = np.random.default_rng(5)
    reps = 300
    obs = rng.multinomial(n, q, size=reps)
    x2 = ((obs - n * p) ** 2 / (n * p)).sum(axis=1)
    rate = np.mean(stats.chi2.sf(x2, k - 1) <= alpha)
    print(f"power at n={n}: {rate:.3f} over R={reps}")
    assert abs(rate - 0.9) <= 2 * np.sqrt(0.9 * 0.1 / reps) + 0.01


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: required_n_oracle(0.0, 10, 0.01), "`delta_tv`"),
        (lambda: required_n_oracle(0.1, 1, 0.01), "`k`"),
        (lambda: required_n_two_sample(0.1, 10, 0.01, power=0.005), "`power`"),
        (lambda: required_n_equivalence_oracle(0.1, 0.5, 0.05), "`k`"),
        (lambda: noncentrality_for_power(0, 0.05), "`dof`"),
    ],
)
def test_invalid_input_names_the_parameter(call, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        call()
