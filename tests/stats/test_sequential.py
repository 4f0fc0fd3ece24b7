"""Anytime-valid e-processes and the time-uniform TV bound (speceq.stats.sequential).

Validity is checked two ways: exactly (one step of every e-process has conditional expectation
<= 1 under H0, computed by enumeration on hypothesis-drawn laws) and by seeded A/A simulation
with the path monitored at every observation. benchmarks/sequential.py runs the larger sweeps.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from speceq.stats import sequential as seq

probs = st.lists(st.floats(0.01, 1.0), min_size=2, max_size=6).map(lambda w: np.array(w) / np.sum(w))


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=40), probs.filter(lambda p: p.size == 4), st.floats(0.5, 50))
def test_plugin_lr_matches_its_definition(x: list[int], p: np.ndarray, beta: float) -> None:
    got = seq.plugin_lr_log_e(np.array(x), p, betas=(beta,))
    counts = np.zeros(4)
    ref, total = [], 0.0
    for t, xi in enumerate(x):
        total += math.log((counts[xi] + beta * p[xi]) / (t + beta) / p[xi])
        counts[xi] += 1
        ref.append(total)
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(-1, 4), st.integers(-1, 4)), min_size=1, max_size=40), st.floats(0.05, 0.95))
def test_paired_exchangeability_matches_its_definition(pairs: list[tuple[int, int]], w: float) -> None:
    a = np.array([p[0] for p in pairs])
    b = np.array([p[1] for p in pairs])
    got = seq.paired_exchangeability_log_e(a, b, weights=(w,))
    ca: dict[int, int] = {}
    cb: dict[int, int] = {}
    g = seq.PAIR_SMOOTHING
    ref, total = [], 0.0
    for x, y in pairs:
        if x != y:
            num = (cb.get(y, 0) + g) * (ca.get(x, 0) + g)
            r = num / (num + (cb.get(x, 0) + g) * (ca.get(y, 0) + g))
            total += math.log(1 - w + 2 * w * r)
        ca[x] = ca.get(x, 0) + 1
        cb[y] = cb.get(y, 0) + 1
        ref.append(total)
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10)


def _plugin_lr_one_step_mean(log_e_of: Callable[..., np.ndarray], p: np.ndarray, past: np.ndarray,
                             betas: tuple[float, ...]) -> float:
    """E_{x ~ p}[E_{t+1} / E_t] of the plug-in LR after ``past``, each factor read off ``log_e_of``'s path."""
    total = 0.0
    for x in range(p.size):
        path = log_e_of(np.append(past, x), p, betas=betas)
        prev = path[-2] if past.size else 0.0
        total += p[x] * math.exp(path[-1] - prev)
    return total


@settings(max_examples=80, deadline=None, derandomize=True)
@given(probs, st.integers(0, 30), st.floats(0.5, 100))
def test_plugin_lr_one_step_is_fair_under_the_null(p: np.ndarray, seen: int, beta: float) -> None:
    """E_p[E_{t+1} / E_t | past] = 1 exactly, for one prior strength and for the default mixture:
    the path is a martingale. The factors come from ``plugin_lr_log_e`` itself."""
    past = np.random.default_rng(seen).integers(0, p.size, size=seen)
    assert _plugin_lr_one_step_mean(seq.plugin_lr_log_e, p, past, (beta,)) == pytest.approx(1.0, abs=1e-9)
    assert _plugin_lr_one_step_mean(seq.plugin_lr_log_e, p, past, seq.DEFAULT_BETAS) == pytest.approx(1.0, abs=1e-9)


def test_the_fairness_check_fails_a_plugin_lr_that_is_not_a_martingale() -> None:
    """Planted bug: log E gains log 2 per observation. The one-step check must see a mean of 2."""
    def inflated(x: np.ndarray, probs: np.ndarray, betas: tuple[float, ...]) -> np.ndarray:
        return seq.plugin_lr_log_e(x, probs, betas=betas) + math.log(2.0) * np.arange(1, np.size(x) + 1)

    p = np.array([0.5, 0.3, 0.2])
    past = np.array([0, 0, 1, 2, 0])
    assert _plugin_lr_one_step_mean(inflated, p, past, (2.0,)) == pytest.approx(2.0, abs=1e-9)
    assert _plugin_lr_one_step_mean(seq.plugin_lr_log_e, p, past, (2.0,)) == pytest.approx(1.0, abs=1e-9)


@settings(max_examples=80, deadline=None, derandomize=True)
@given(probs, st.sampled_from(["argmax", "temperature", "normal"]))
def test_one_step_of_the_martingale_e_processes_has_mean_at_most_one(p: np.ndarray, kind: str) -> None:
    """Every e-process for f(x) - E_p f: its one-step factor averages <= 1 under x ~ p (exact)."""
    x = np.arange(p.size)
    if kind == "argmax":
        m = p.max()
        d = (x == np.argmax(p)).astype(float) - m
        log_e = seq.betting_log_e(d[:, None], np.full((p.size, 1), 1 - m), np.full((p.size, 1), -m))
    elif kind == "temperature":
        logp = np.log(p)
        mean = float(np.sum(p * logp))
        var = float(np.sum(p * logp**2) - mean**2)
        d = logp - mean
        log_e = seq.betting_log_e(d[:, None], np.full((p.size, 1), -mean), None, np.full((p.size, 1), var))
    else:
        f = np.log(np.roll(p, 1)) - np.log(p)
        mean = float(np.sum(p * f))
        var = float(np.sum(p * f**2) - mean**2)
        log_e = seq.normal_mixture_log_e((f - mean)[:, None], np.full((p.size, 1), var))
    assert float(np.sum(p * np.exp(log_e[:, 0]))) <= 1.0 + 1e-9


@settings(max_examples=60, deadline=None, derandomize=True)
@given(probs, st.integers(0, 20))
def test_one_step_of_the_paired_test_is_fair_under_the_null(p: np.ndarray, seen: int) -> None:
    rng = np.random.default_rng(seen)
    a_past, b_past = rng.choice(p.size, size=seen, p=p), rng.choice(p.size, size=seen, p=p)
    total = 0.0
    for x in range(p.size):
        for y in range(p.size):
            a = np.append(a_past, x)
            b = np.append(b_past, y)
            log_e = seq.paired_exchangeability_log_e(a, b)
            prev = log_e[-2] if seen else 0.0
            total += p[x] * p[y] * math.exp(log_e[-1] - prev) if np.isfinite(prev) else 0.0
    assert total == pytest.approx(1.0, abs=1e-9)


def _crossing_rate(log_e: np.ndarray, alpha: float) -> float:
    return float((log_e.max(axis=1) >= math.log(1 / alpha)).mean())


def test_aa_crossing_rates_monitored_at_every_observation_stay_below_alpha() -> None:
    """R = 1500 A/A paths of 200 observations, each looked at after every observation."""
    rng = np.random.default_rng(20261201)
    R, T, alpha = 1500, 200, 0.05
    p = np.array([0.4, 0.25, 0.15, 0.1, 0.05, 0.05])
    x = rng.choice(p.size, size=(R, T), p=p)
    y = rng.choice(p.size, size=(R, T), p=p)
    m = rng.uniform(0.2, 0.95, size=(R, T))
    hit = (rng.random((R, T)) < m).astype(float)
    rates = {
        "plug-in LR": _crossing_rate(seq.plugin_lr_log_e(x, p), alpha),
        "paired": _crossing_rate(seq.paired_exchangeability_log_e(x, y), alpha),
        "betting": _crossing_rate(seq.betting_log_e(hit - m, 1 - m, -m), alpha),
    }
    # binomial sd at 0.05 is 0.0056: alpha + 3 sd would flag a real excess
    assert all(r <= alpha + 0.017 for r in rates.values()), rates


def test_shifts_are_detected_early() -> None:
    rng = np.random.default_rng(5)
    R, T = 200, 2000
    p = np.array([0.4, 0.25, 0.15, 0.1, 0.05, 0.05])
    q = np.array([0.3, 0.25, 0.15, 0.1, 0.1, 0.1])  # TV 0.1
    x = rng.choice(p.size, size=(R, T), p=q)
    y = rng.choice(p.size, size=(R, T), p=p)
    lr = seq.plugin_lr_log_e(x, p)
    pair = seq.paired_exchangeability_log_e(y, x)
    thr = math.log(1e4)
    assert (lr.max(axis=1) >= thr).mean() >= 0.9
    assert (pair.max(axis=1) >= thr).mean() >= 0.5
    assert np.median(np.argmax(lr >= thr, axis=1)) < 600


def test_a_zero_probability_draw_is_infinite_evidence() -> None:
    log_e = seq.plugin_lr_log_e(np.array([0, 1, 2]), np.array([0.5, 0.5, 0.0]))
    assert np.isfinite(log_e[1]) and log_e[2] == np.inf
    res = seq.eprocess_result("x", log_e, 1e-6)
    assert res.pvalue == 0.0 and res.first_crossing == 2


def test_result_object() -> None:
    res = seq.normal_mixture_eprocess(np.full(500, 0.5), np.full(500, 0.25), name="drift", level=1e-3)
    assert res.rejects and res.pvalue < 1e-3 and res.n == 500
    assert res.max_evalue >= res.evalue > 1
    assert "always-valid p" in res.summary() and res.to_dict()["name"] == "drift"
    quiet = seq.eprocess_result("none", np.zeros(0), 0.01)
    assert quiet.pvalue == 1.0 and not quiet.rejects
    with pytest.raises(ValueError, match="1-D"):
        seq.normal_mixture_eprocess(np.zeros((2, 2)), np.zeros((2, 2)), name="x", level=0.1)
    with pytest.raises(ValueError, match="index"):
        seq.plugin_lr_eprocess(np.array([5]), np.array([0.5, 0.5]), name="x", level=0.1)


def test_look_grid_is_anchored_and_levels_sum_to_alpha() -> None:
    grid = seq.look_grid(12000)
    assert grid[:12] == (3, 4, 5, 6, 8, 9, 10, 12, 15, 18, 21, 24)
    assert grid[-9:] == (3000, 3750, 4500, 5250, 6000, 7500, 9000, 10500, 12000)  # four steps per doubling
    assert all(b > a for a, b in zip(grid, grid[1:]))
    assert seq.look_grid(2) == ()
    assert seq.grid_point_at_most(3100) == (39, 3000)
    assert seq.grid_point_at_most(2) is None
    assert sum(seq.grid_level(k, 0.01) for k in range(10_000)) == pytest.approx(0.01, rel=1e-3)


def _time_uniform_non_coverage(pa: float, pb: float, max_n: int, alpha: float) -> float:
    """P(the bound read at some grid point <= max_n is below the true TV), exactly.

    Two laws on 2 symbols (group a puts pa on symbol 0, group b pb; TV = |pa - pb|), one draw
    of each per step: with D_t = (a's count of symbol 0) - (b's), the plug-in TV at n is |D_n| / n,
    and D is a random walk with steps +1 (pa (1 - pb)), -1 ((1 - pa) pb), 0 (otherwise). The law
    of D is carried forward step by step; at each grid point the states whose bound misses
    the TV are removed and their mass counted, so the sum is the probability of a miss at any look.
    """
    grid = seq.look_grid(max_n)
    up, down = pa * (1 - pb), (1 - pa) * pb
    tv = abs(pa - pb)
    mass = np.zeros(2 * max_n + 1)
    mass[max_n] = 1.0
    distance = np.abs(np.arange(-max_n, max_n + 1))
    missed, t = 0.0, 0
    for k, g in enumerate(grid):
        for _ in range(g - t):
            step = (1 - up - down) * mass
            step[1:] += up * mass[:-1]
            step[:-1] += down * mass[1:]
            mass = step
        t = g
        upper = np.array([seq.sequential_tv_upper_bound(d / g, g, k, g, alpha).upper for d in range(g + 1)])
        miss = upper[np.minimum(distance, g)] < tv
        missed += float(mass[miss].sum())
        mass[miss] = 0.0
    return missed


#: (pa, pb, max_n, alpha): exact miss probability <= 2e-4 with the bound; 0.229 / 0.345 without the look correction.
LOOK_CASES = [(0.35, 0.65, 3000, 0.2), (0.4, 0.6, 6000, 0.3)]


@pytest.mark.parametrize(("pa", "pb", "max_n", "alpha"), LOOK_CASES)
def test_tv_confidence_sequence_covers_the_true_tv_at_every_look(pa: float, pb: float, max_n: int, alpha: float) -> None:
    """P(some look's bound < true TV) <= alpha, with the bound read at every grid point (exact, no simulation).

    Two symbols and a TV of many standard errors: the plug-in has no upward bias to hide a
    too narrow bound behind, and 40-odd looks make a missing correction for looks visible.
    """
    assert _time_uniform_non_coverage(pa, pb, max_n, alpha) <= alpha


def test_the_look_check_fails_a_bound_without_a_correction_for_looks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted bug: every look spends the whole alpha (grid_level(k, alpha) = alpha)."""
    monkeypatch.setattr(seq, "grid_level", lambda k, alpha: alpha)
    for pa, pb, max_n, alpha in LOOK_CASES:
        assert _time_uniform_non_coverage(pa, pb, max_n, alpha) > alpha


def test_sequential_bound_is_wider_than_the_fixed_one() -> None:
    from speceq.stats import tv_upper_bound_two_sample

    b = seq.sequential_tv_upper_bound(0.05, 3100, 39, 3000, 1e-3, positions=8)
    assert b.level == pytest.approx(1e-3 / (40 * 41) / 8)
    assert b.upper > tv_upper_bound_two_sample(0.05, 3000, 3000, 1e-3 / 8)
    assert "grid point n = 3000" in b.summary()
    with pytest.raises(ValueError, match="exceeds"):
        seq.sequential_tv_upper_bound(0.05, 100, 3, 188, 0.01)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.lists(st.floats(-4.0, 4.0, allow_subnormal=False), min_size=0, max_size=12), st.floats(0.0, 6.0))
def test_paired_sign_process_is_a_martingale_given_the_magnitudes(past: list[float], last: float) -> None:
    """Under H0 the sign of the newest pair difference is a fair coin given |D|: E[E_t | past] = E_{t-1}."""
    up = seq.paired_sign_log_e(np.array([*past, last]))[-1]
    down = seq.paired_sign_log_e(np.array([*past, -last]))[-1]
    before = seq.paired_sign_log_e(np.array(past))[-1] if past else 0.0
    assert 0.5 * (math.exp(up) + math.exp(down)) == pytest.approx(math.exp(before), rel=1e-9)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.lists(st.floats(-3.0, 3.0, allow_subnormal=False), min_size=0, max_size=10), st.floats(0.01, 0.99),
       st.floats(0.1, 10.0), st.floats(0.01, 5.0))
def test_scale_free_mixture_is_a_supermartingale(past: list[float], r: float, jump: float, v_past: float) -> None:
    """One step of a two-point martingale difference (value jump (1-r) w.p. r, -jump r w.p. 1-r): E[E_t] <= E_{t-1}."""
    d_hi, d_lo = jump * (1 - r), -jump * r
    v = jump * jump * r * (1 - r)
    vs = np.full(len(past) + 1, v_past)
    vs[-1] = v
    before = seq.scale_free_mixture_log_e(np.array(past), vs[:-1])[-1] if past else 0.0
    hi = seq.scale_free_mixture_log_e(np.array([*past, d_hi]), vs)[-1]
    lo = seq.scale_free_mixture_log_e(np.array([*past, d_lo]), vs)[-1]
    assert r * math.exp(hi) + (1 - r) * math.exp(lo) <= math.exp(before) * (1 + 1e-9)


def test_scale_free_mixture_does_not_depend_on_units() -> None:
    rng = np.random.default_rng(8)
    d, v = rng.standard_normal(200), np.full(200, 1.0)
    np.testing.assert_allclose(seq.scale_free_mixture_log_e(d, v), seq.scale_free_mixture_log_e(1e-3 * d, 1e-6 * v),
                               rtol=1e-9, atol=1e-12)


def test_paired_sign_eprocess_aa_and_power() -> None:
    """Monitored at every pair: A/A crossings of 1/0.01 at most 0.01 (+ band); a shift is caught."""
    rng = np.random.default_rng(9)
    reps, n = 2000, 1000
    d = rng.exponential(size=(reps, n)) - rng.exponential(size=(reps, n))  # skewed scores, symmetric differences
    crossed = (seq.paired_sign_log_e(d).max(axis=1) >= math.log(100)).mean()
    assert crossed <= 0.01 + 3 * math.sqrt(0.01 * 0.99 / reps)
    res = seq.paired_sign_eprocess(rng.normal(size=2000), rng.normal(size=2000) + 0.25, name="shift", level=1e-4)
    assert res.rejects and res.pvalue < 1e-4
    with pytest.raises(ValueError, match="equal length"):
        seq.paired_sign_eprocess(np.zeros(2), np.zeros(3), name="x", level=0.01)


def test_two_sample_eprocesses_estimate_what_they_bet_on() -> None:
    """The paired exchangeability e-process carries the plug-in TV of its pairs, the paired sign one the mean
    difference; the one-sample ones carry none."""
    import numpy as np

    from speceq.stats.sequential import normal_mixture_eprocess, paired_exchangeability_eprocess

    a, b = np.array([0, 0, 1, 1, 2]), np.array([0, 1, 1, 1, 1, 9])  # b's extra draw has no pair: not counted
    res = paired_exchangeability_eprocess(a, b, name="seq pair length", level=1e-3)
    assert res.n == 5 and res.effect == pytest.approx(0.5 * (0.2 + 0.4 + 0.2))
    assert paired_exchangeability_eprocess(a[:0], b, name="x", level=1e-3).effect is None
    assert normal_mixture_eprocess(np.ones(3), np.ones(3), name="z", level=1e-3).effect is None
