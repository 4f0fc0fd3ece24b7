"""The size of a shift: held-out TV estimate with lower and upper bounds (speceq.stats.tv_interval)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from speceq.stats import TVInterval, draws_to_certify, max_tv_size, tv_size, tv_upper_bound_two_sample


def _shifted(p: np.ndarray, tv: float) -> np.ndarray:
    """A law at TV exactly ``tv`` from ``p``: mass ``tv`` moved from the first cell to the last."""
    q = p.copy()
    q[0] -= tv
    q[-1] += tv
    assert q[0] >= 0
    return q


counts = st.lists(st.integers(0, 40), min_size=2, max_size=12)


@settings(max_examples=60, deadline=None)
@given(counts, counts, st.integers(0, 2**31), st.sampled_from([0.5, 0.05, 1e-3]))
def test_bounds_are_ordered_and_in_range(a: list[int], b: list[int], seed: int, alpha: float) -> None:
    k = min(len(a), len(b))
    a, b = np.array(a[:k]), np.array(b[:k])
    a[0] += 2  # at least 2 draws each
    b[-1] += 2
    s = tv_size(a, b, alpha=alpha, rng=np.random.default_rng(seed))
    assert 0.0 <= s.low <= s.estimate <= s.high <= 1.0
    assert s.high == max(s.estimate, tv_upper_bound_two_sample(s.plug_in, int(a.sum()), int(b.sum()), alpha))
    assert s.level == pytest.approx(1 - alpha)
    again = tv_size(a, b, alpha=alpha, rng=np.random.default_rng(seed))
    assert again == s  # the split is the only randomness, and it is the rng's


def test_the_estimate_is_not_biased_upward_when_the_laws_agree() -> None:
    """Two engines sampling the same 60-token law: the plug-in TV is all noise (about 0.1 at 2 000 draws);
    the held-out estimate averages to a small fraction of it and the lower bound stays at 0."""
    rng = np.random.default_rng(1)
    p = rng.dirichlet(np.full(60, 0.5))
    est, plug, lows = [], [], []
    for _ in range(100):
        s = tv_size(rng.multinomial(2000, p), rng.multinomial(2000, p), alpha=1e-3, rng=rng)
        est.append(s.estimate)
        plug.append(s.plug_in)
        lows.append(s.low)
    assert np.mean(plug) > 0.05
    assert np.mean(est) < np.mean(plug) / 5
    assert max(lows) == 0.0


def test_a_large_shift_is_measured_and_bounded_on_both_sides() -> None:
    """TV 0.3 between two 20-token laws at 5 000 draws: estimate near 0.3 and 0 < low < 0.3 < high."""
    rng = np.random.default_rng(2)
    p = np.full(20, 1 / 20)
    p[0] += 0.3
    p[1:] -= 0.3 / 19
    q = np.full(20, 1 / 20)
    s = tv_size(rng.multinomial(5000, p), rng.multinomial(5000, q), alpha=1e-3, rng=rng)
    assert s.estimate == pytest.approx(0.3, abs=0.03)
    assert 0.2 < s.low < 0.3 < s.high < 0.4


@pytest.mark.parametrize("tv", [0.0, 0.02, 0.1])
def test_the_interval_covers_the_true_tv(tv: float) -> None:
    """Seeded coverage check at alpha 0.1 on a 40-token Zipf law (docs/measurements/calibration.md has the larger
    study): the interval is valid, so it covers in at least 90 % of draws; 200 draws, a margin of 3 standard errors."""
    rng = np.random.default_rng(3)
    p = 1 / np.arange(1, 41) ** 1.1
    p /= p.sum()
    q = _shifted(p, tv)
    covered = 0
    for _ in range(200):
        s = tv_size(rng.multinomial(1000, p), rng.multinomial(1000, q), alpha=0.1, rng=rng)
        covered += s.low <= tv <= s.high
    assert covered / 200 >= 0.9 - 3 * (0.9 * 0.1 / 200) ** 0.5


def test_the_lower_bound_fails_when_it_uses_the_same_draws_twice() -> None:
    """Why the split: choosing the set A and measuring it on the same draws (the plug-in's set) would put the
    'lower bound' above the true TV 0 in most draws; the held-out one never does here."""
    rng = np.random.default_rng(4)
    p = np.full(50, 1 / 50)
    held_out_above, in_sample_above = 0, 0
    for _ in range(100):
        a, b = rng.multinomial(500, p), rng.multinomial(500, p)
        held_out_above += tv_size(a, b, alpha=0.1, rng=rng).low > 0
        chosen = a > b
        in_sample_above += (a[chosen].sum() - b[chosen].sum()) / 500 > 0.05
    assert held_out_above <= 10 and in_sample_above > 50


def test_max_over_positions_splits_alpha_and_names_the_position() -> None:
    rng = np.random.default_rng(5)
    p = np.full(10, 0.1)
    p[0], p[-1] = 0.2, 0.0  # cell 0 at 0.2, the last cell empty
    q = _shifted(p, 0.15)  # cell 0 from 0.2 to 0.05: TV 0.15
    ca = [rng.multinomial(3000, p) for _ in range(4)]
    cb = [rng.multinomial(3000, p), rng.multinomial(3000, q), rng.multinomial(3000, p), rng.multinomial(3000, p)]
    s = max_tv_size(ca, cb, alpha=1e-3, rng=np.random.default_rng(0))
    assert isinstance(s, TVInterval) and s.positions == 4 and s.level == pytest.approx(1 - 1e-3)
    one = [tv_size(a, b, alpha=1e-3 / 4, rng=np.random.default_rng(9)) for a, b in zip(ca, cb)]
    assert s.high == pytest.approx(max(x.high for x in one))
    assert s.position == int(np.argmax([x.high for x in one]))
    assert 0.0 < s.low < 0.15 < s.high  # the shifted position shows at alpha / 4
    effect = s.effect()
    assert (effect.estimate, effect.low, effect.high, effect.unit) == (s.estimate, s.low, s.high, "TV")


def test_bad_input_says_what_and_where() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="aligned"):
        tv_size(np.array([1, 2]), np.array([1, 2, 3]), alpha=0.1, rng=rng)
    with pytest.raises(ValueError, match="at least 2 draws"):
        tv_size(np.array([1, 0]), np.array([3, 2]), alpha=0.1, rng=rng)
    with pytest.raises(ValueError, match="position 1: .*at least 2 draws"):
        max_tv_size([np.array([3, 3]), np.array([1, 0])], [np.array([3, 3]), np.array([2, 2])], alpha=0.1, rng=rng)
    with pytest.raises(ValueError, match="same positive number"):
        max_tv_size([], [], alpha=0.1, rng=rng)


def test_draws_to_certify_is_the_margin_alone() -> None:
    n = draws_to_certify(0.02, alpha=1e-3, positions=4)
    assert tv_upper_bound_two_sample(0.0, n, n, 1e-3 / 4) < 0.02 <= tv_upper_bound_two_sample(0.0, n - 1, n - 1,
                                                                                                1e-3 / 4)
