"""The chain-binomial goodness of fit: exact validity at small levels, power, support violations."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from speceq.kernels.gof import binomial_two_sided, chain_gof


def test_binomial_two_sided_matches_the_direct_sum() -> None:
    m, pi = 40, 0.3
    pmf = stats.binom.pmf(np.arange(m + 1), m, pi)
    for x in (0, 5, 12, 13, 20, 40):
        direct = pmf[np.abs(np.arange(m + 1) - m * pi) >= abs(x - m * pi) - 1e-9].sum()
        assert binomial_two_sided(np.array([x]), np.array([m]), np.array([pi]))[0] == pytest.approx(direct, rel=1e-9)
    assert binomial_two_sided(np.array([0]), np.array([0]), np.array([0.5]))[0] == 1.0


def test_exact_size_by_enumeration_of_a_small_multinomial() -> None:
    """P(p <= u) <= u for every u, computed exactly over all tables of n = 60 on 3 bins."""
    probs = np.array([0.5, 0.3, 0.2])
    n = 60
    pvals, weights = [], []
    for a in range(n + 1):
        for b in range(n + 1 - a):
            c = np.array([a, b, n - a - b])
            weights.append(stats.multinomial.pmf(c, n, probs))
            pvals.append(chain_gof(c, probs, min_expected=1.0).pvalue)
    pvals, weights = np.array(pvals), np.array(weights)
    for u in (0.2, 0.05, 0.01, 1e-3, 1e-4, 1e-5):
        assert weights[pvals <= u].sum() <= u * (1 + 1e-9), u


def test_null_sizes_are_at_most_nominal_by_simulation() -> None:
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(40))
    pv = np.array([chain_gof(rng.multinomial(1000, p), p).pvalue for _ in range(4000)])
    for u in (0.1, 0.01):
        assert (pv <= u).mean() <= u + 3 * np.sqrt(u / 4000)


def test_detects_a_shift_and_a_support_violation() -> None:
    rng = np.random.default_rng(1)
    p = rng.dirichlet(np.ones(30))
    q = 0.8 * p + 0.2 * rng.dirichlet(np.ones(30))
    assert chain_gof(rng.multinomial(3000, q), p).pvalue < 1e-8
    p0 = p.copy()
    p0[3] = 0.0
    p0 /= p0.sum()
    c = rng.multinomial(500, p0)
    c[3] += 1
    res = chain_gof(c, p0)
    assert res.method == "support" and res.pvalue == 0.0 and res.support_violations == 1


def test_a_point_mass_is_degenerate() -> None:
    res = chain_gof(np.array([0, 7, 0]), np.array([0.0, 1.0, 0.0]))
    assert res.method == "degenerate" and res.pvalue == 1.0


def test_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        chain_gof(np.array([1, 2]), np.array([0.5, 0.6]))
    with pytest.raises(ValueError):
        chain_gof(np.array([0, 0]), np.array([0.5, 0.5]))
