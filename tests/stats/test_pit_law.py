"""The PIT-law certificate: exact statistic, simultaneous coverage (measured), design size, reach weighting."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sp_stats

from speceq.stats.pit_law import kolmogorov_uniform_statistic, pit_law_bound, required_n_pit_law


def test_statistic_is_scipys_kolmogorov_smirnov() -> None:
    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 100):
        u = rng.beta(1.5, 1.0, size=n)
        assert kolmogorov_uniform_statistic(u) == pytest.approx(sp_stats.kstest(u, "uniform").statistic, abs=1e-12)
    assert kolmogorov_uniform_statistic(np.zeros(0)) == 0.0


def _beta_k(a: float) -> float:
    """Kolmogorov distance of Beta(a, 1) (CDF u**a) from U(0, 1)."""
    u = (1.0 / a) ** (1.0 / (a - 1.0))
    return abs(u**a - u)


@pytest.mark.parametrize("a, reach", [(1.4, (1.0, 1.0, 0.6, 0.2)), (0.8, (1.0, 0.9, 0.9, 0.05))])
def test_simultaneous_coverage_under_a_shift(a: float, reach: tuple[float, ...]) -> None:
    """Rows reach position t with probability reach[t] (nested); their PITs follow Beta(a, 1), so
    D_t = reach[t] * K(a). The bound must cover every D_t at once in >= 1 - alpha of the runs:
    measured 0 misses in 2 000 runs at alpha = 0.05 for both laws (the union bound is conservative)."""
    rng = np.random.default_rng(1)
    k, alpha, rows, L, runs = _beta_k(a), 0.05, 200, len(reach), 2000
    truth = [r * k for r in reach]
    misses = 0
    for _ in range(runs):
        length = np.zeros(rows, dtype=np.int64)
        v = rng.random(rows)
        for t in range(L):  # reach[] is non-increasing: row reaches t iff v < reach[t]
            length += v < reach[t]
        pos = np.concatenate([np.arange(n) for n in length]).astype(np.int64)
        u = rng.beta(a, 1.0, size=pos.size)
        res = pit_law_bound(u, pos, rows=rows, positions=L, alpha=alpha)
        misses += any(res.positions[t].bound < truth[t] for t in range(L))
    print(f"{misses} misses in {runs} runs")
    assert misses <= alpha * runs * 0.2  # far inside the guarantee; 0 measured


def test_design_size_certifies_uniform_rows_about_ninety_percent_of_the_time() -> None:
    """At required_n_pit_law(0.15, 8, 1e-3) rows, exactly uniform PITs at every position give a
    bound < 0.15 in ~90 % of runs (all 8 positions at once; measured 281 of 300 runs)."""
    n = required_n_pit_law(0.15, 8, 1e-3)
    assert 600 < n < 800
    rng = np.random.default_rng(2)
    runs = 300
    wins = 0
    for _ in range(runs):
        u = rng.random(n * 8)
        pos = np.tile(np.arange(8), n)
        wins += pit_law_bound(u, pos, rows=n, positions=8, alpha=1e-3).bound < 0.15
    print(f"certified in {wins} of {runs} runs at n={n}")
    assert 0.85 <= wins / runs
    assert required_n_pit_law(0.1, 8, 1e-3) > 2 * n  # about (0.15/0.1)^2 = 2.25 times


def test_rarely_reached_positions_are_weighted_by_their_reach() -> None:
    """A position only 5 of 1 000 rows reach cannot move D_t much, whatever its PITs: its bound is
    the reach bound (Clopper-Pearson), not the useless conditional Kolmogorov bound of 5 values."""
    rng = np.random.default_rng(3)
    rows = 1000
    u = np.concatenate([rng.random(rows), np.full(5, 0.999)])  # the 5 late tokens: as far from uniform as can be
    pos = np.concatenate([np.zeros(rows, dtype=np.int64), np.ones(5, dtype=np.int64)])
    res = pit_law_bound(u, pos, rows=rows, positions=3, alpha=1e-3)
    late = res.positions[1]
    assert late.n == 5 and late.statistic > 0.99
    assert late.bound == pytest.approx(late.reach_upper) and late.bound < 0.03
    assert res.positions[2].n == 0 and res.positions[2].bound < 0.02  # reached by none
    assert res.worst_position == 0 and res.bound < 0.12
    assert "worst at position 0" in res.summary()


def test_a_real_shift_is_not_certified() -> None:
    rng = np.random.default_rng(4)
    n = 600
    u = rng.beta(2.0, 1.0, size=n)  # a too-flat candidate: K = 0.25
    res = pit_law_bound(u, np.zeros(n, dtype=np.int64), rows=n, positions=1, alpha=1e-3)
    assert res.bound > 0.25 > 0.15


@pytest.mark.parametrize("kwargs, message", [
    ({"u": [0.5, 1.2], "position": [0, 0]}, "PIT values in"),
    ({"u": [0.5], "position": [0, 0]}, "aligned"),
    ({"u": [0.5], "position": [3]}, r"must lie in \[0, 2\)"),
    ({"u": [0.5, 0.5, 0.5], "position": [0, 0, 0]}, "more than `rows`"),
    ({"u": [0.5], "position": [0.0]}, "integers"),
])
def test_bad_inputs(kwargs: dict, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        pit_law_bound(np.asarray(kwargs["u"]), np.asarray(kwargs["position"]), rows=2, positions=2, alpha=0.01)


def test_required_n_grows_with_positions_and_shrinks_with_tolerance() -> None:
    assert required_n_pit_law(0.15, 1, 1e-3) < required_n_pit_law(0.15, 16, 1e-3)
    q = float(sp_stats.kstwobign.ppf(0.9 ** (1 / 4)))
    n = required_n_pit_law(0.2, 4, 0.01)
    assert q / math.sqrt(n) + math.sqrt(math.log(2 / (0.01 / 8)) / (2 * n)) <= 0.2
    assert q / math.sqrt(n - 1) + math.sqrt(math.log(2 / (0.01 / 8)) / (2 * (n - 1))) > 0.2
