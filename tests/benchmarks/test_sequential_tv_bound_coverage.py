"""benchmarks/sequential_tv_bound_coverage.py: its plug-in TV paths, its laws, and a seeded fast subset of its measurement.

The subset runs at alpha = 0.1 on the least favourable law (a fair coin against a coin at TV 0.1), where a few thousand
paths resolve the rate; a bound that does not spend alpha over the look grid (the fixed-n bound at every look) misses
more often than alpha there, and the test shows the measurement catches it.
"""

from __future__ import annotations

import numpy as np
import pytest
from benchmark_scripts import load_script

from speceq.pipeline.sequential.driver import look_totals
from speceq.stats import sequential as seq
from speceq.stats import tv_distance


def _script():  # noqa: ANN202
    return load_script("sequential_tv_bound_coverage")


def test_candidate_laws_sit_at_their_stated_tv() -> None:
    cov = _script()
    for p, toward in ((cov.zipf(10, 1.0), "last"), (cov.zipf(49_152, 1.1), "uniform"), (np.array([0.5, 0.5]), "last")):
        for tv in (0.0, 0.01, 0.1, 0.3):
            q = cov.at_tv(p, tv, toward)
            assert q.min() >= 0 and abs(q.sum() - 1.0) < 1e-12
            assert abs(0.5 * np.abs(p - q).sum() - tv) < 1e-12
    with pytest.raises(ValueError, match="not reachable"):
        cov.at_tv(np.array([0.5, 0.5]), 0.6)


def test_draw_by_draw_plugin_tv_is_the_tv_of_the_prefix_counts() -> None:
    """The sorted-draws shortcut equals tv_distance of the two engines' counts of the first g draws."""
    cov = _script()
    p = cov.zipf(300, 1.1)
    q = cov.at_tv(p, 0.1, "uniform")
    grid = [3, 4, 5, 6, 8, 50, 187, 400]
    got = cov.plugin_tv_draws(p, q, grid, 5, np.random.default_rng(7))
    rng = np.random.default_rng(7)  # the same stream: one block of 5 paths, p's uniforms then q's
    a = np.minimum(np.searchsorted(np.cumsum(p), rng.random((5, 400)), side="right"), 299)
    b = np.minimum(np.searchsorted(np.cumsum(q), rng.random((5, 400)), side="right"), 299)
    for r in range(5):
        for j, g in enumerate(grid):
            want = tv_distance(np.bincount(a[r, :g], minlength=300), np.bincount(b[r, :g], minlength=300))
            assert abs(got[r, j] - want) < 1e-12, (r, g)


def test_draws_and_count_increments_agree_in_law() -> None:
    """Both simulations of the same growing path give the same mean plug-in TV (within 4 standard errors)."""
    cov = _script()
    p = cov.zipf(10, 1.0)
    q = cov.at_tv(p, 0.05)
    grid = [10, 40, 200]
    x = cov.plugin_tv_counts(p, q, grid, 4000, np.random.default_rng(1))
    y = cov.plugin_tv_draws(p, q, grid, 4000, np.random.default_rng(2))
    se = np.sqrt(x.var(axis=0) / 4000 + y.var(axis=0) / 4000)
    assert np.all(np.abs(x.mean(axis=0) - y.mean(axis=0)) < 4 * se), (x.mean(axis=0), y.mean(axis=0), se)


def _coin_world():  # noqa: ANN202
    cov = _script()
    return cov, cov.world("coin", [np.array([0.5, 0.5])], [0.1], 96_000, tolerance=0.1)


def test_time_uniform_bound_covers_at_every_look_where_the_fixed_n_bound_does_not() -> None:
    cov, w = _coin_world()
    got = cov.measure(w, 3000, 0.1, np.random.default_rng(20261207))
    assert got["max_n"] == look_totals(96_000)[-1] and got["looks"] == len(look_totals(96_000))
    assert got["miss"]["ci95"][0] <= 0.1, got["miss"]
    assert got["within_tolerance"]["ci95"][0] <= 0.1, got["within_tolerance"]
    assert got["miss_fixed_n"]["ci95"][0] > 0.1, got["miss_fixed_n"]  # the too narrow contrast misses > alpha


def test_a_bound_that_does_not_spend_alpha_over_the_grid_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The project's bound with its grid levels alpha_k replaced by alpha (the fixed-n level at every look)."""
    cov, w = _coin_world()
    monkeypatch.setattr(seq, "grid_level", lambda k, alpha: alpha)
    got = cov.measure(w, 3000, 0.1, np.random.default_rng(20261207))
    assert got["miss"]["ci95"][0] > 0.1, got["miss"]
    assert got["within_tolerance"]["ci95"][0] > 0.1, got["within_tolerance"]
