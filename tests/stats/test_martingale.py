"""Martingale z-tests and the support check."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from speceq.stats import (
    argmax_leak_z,
    draft_drift_z,
    martingale_z,
    skew_corrected_pvalue,
    support_violations,
    temperature_drift_z,
)
from speceq.stats.synthetic import random_target_probs, sample_categorical, scores_from_probs, tempered


def test_martingale_z_formula() -> None:
    f = np.array([1.0, 0.0, 1.0, 1.0])
    mean = np.array([0.5, 0.5, 0.2, 0.9])
    var = mean * (1 - mean)
    res = martingale_z(f, mean, var, name="demo", min_variance=0.0)
    z = (f - mean).sum() / math.sqrt(var.sum())
    skew = ((f - mean) ** 3).sum() / var.sum() ** 1.5
    assert res.statistic == pytest.approx(z) and res.skewness == pytest.approx(skew)
    assert res.pvalue == pytest.approx(skew_corrected_pvalue(z, skew))
    assert res.pvalue >= 2 * stats.norm.sf(abs(z)) - 1e-15
    assert res.effect == pytest.approx((f - mean).mean()) and res.n == 4
    assert tuple(res) == (res.statistic, res.pvalue)


def test_small_summed_variance_is_guarded() -> None:
    """Near-deterministic laws: sum of variances ~1 makes the normal tail ~100x too light.

    Before the guard 6 non-argmax tokens where max p = 0.999 (1000 tokens, summed variance
    ~1) gave Z = -5, p = 6e-7, while the exact chance of 6 or more is P(Poisson(1) >= 6) ~ 6e-4;
    now p = 1 and the result says why.
    """
    n = 1000
    mean = np.full(n, 0.999)
    f = np.ones(n)
    f[:6] = 0.0
    res = martingale_z(f, mean, mean * (1 - mean), name="demo")
    assert res.guarded and res.pvalue == 1.0 and "below the guard" in res.summary()
    assert not martingale_z(f, mean, mean * (1 - mean), name="demo", min_variance=0.5).guarded


def test_zero_variance_is_deterministic() -> None:
    ones = np.ones(3)
    assert martingale_z(ones, ones, np.zeros(3), name="d").pvalue == 1.0
    res = martingale_z(ones, np.zeros(3), np.zeros(3), name="d")
    assert res.pvalue == 0.0 and res.statistic == math.inf


def test_argmax_leak_is_detected() -> None:
    rng = np.random.default_rng(0)
    probs = random_target_probs(rng, 2000, 20)
    tokens = sample_categorical(probs, rng)
    leak = rng.random(2000) < 0.1  # 10% of tokens replaced by the argmax
    tokens[leak] = probs[leak].argmax(axis=1)
    res = argmax_leak_z(scores_from_probs(probs, tokens))
    assert res.statistic > 0 and res.pvalue < 1e-6


def test_temperature_drift_sign() -> None:
    rng = np.random.default_rng(1)
    probs = random_target_probs(rng, 2000, 20)
    hot = temperature_drift_z(scores_from_probs(probs, sample_categorical(tempered(probs, 1.3), rng)))
    cold = temperature_drift_z(scores_from_probs(probs, sample_categorical(tempered(probs, 0.8), rng)))
    assert hot.statistic < -5 and cold.statistic > 5  # hotter -> less likely tokens -> lower log p


def test_draft_drift_detects_mixture_toward_draft() -> None:
    rng = np.random.default_rng(2)
    probs = random_target_probs(rng, 3000, 20)
    draft = random_target_probs(rng, 3000, 20)
    tokens = sample_categorical(0.8 * probs + 0.2 * draft, rng)
    res = draft_drift_z(scores_from_probs(probs, tokens, draft_probs=draft))
    assert res.statistic > 0 and res.pvalue < 1e-6


def test_support_violation_indices_and_exclusion() -> None:
    rng = np.random.default_rng(3)
    probs = random_target_probs(rng, 50, 10, top_k=3)
    tokens = sample_categorical(probs, rng)
    outside = np.flatnonzero(probs[7] == 0)[0]
    tokens[7] = outside
    scores = scores_from_probs(probs, tokens)
    res = support_violations(scores)
    assert res.failed and res.indices == (7,) and res.pvalue == 0.0
    assert temperature_drift_z(scores).excluded == 1 and temperature_drift_z(scores).n == 49
    clean = support_violations(scores.select(np.arange(50) != 7))
    assert not clean.failed and clean.pvalue == 1.0


def test_validation() -> None:
    rng = np.random.default_rng(4)
    probs = random_target_probs(rng, 10, 5)
    scores = scores_from_probs(probs, sample_categorical(probs, rng))
    with pytest.raises(ValueError, match="no draft scores"):
        draft_drift_z(scores)
    with pytest.raises(ValueError, match="`f` must be finite"):
        martingale_z(np.array([np.inf]), np.zeros(1), np.ones(1), name="x")
    with pytest.raises(ValueError, match="equal lengths"):
        martingale_z(np.zeros(2), np.zeros(1), np.ones(1), name="x")
    with pytest.raises(ValueError, match="`var`"):
        martingale_z(np.zeros(1), np.zeros(1), -np.ones(1), name="x")
    with pytest.raises(TypeError, match="`name`"):
        martingale_z(np.zeros(1), np.zeros(1), np.ones(1), name="")
    with pytest.raises(TypeError, match="`scores`"):
        argmax_leak_z(probs)


def test_skew_corrected_pvalue_is_the_normal_one_without_skew_and_larger_on_the_heavy_side() -> None:
    assert skew_corrected_pvalue(3.0, 0.0) == pytest.approx(2 * stats.norm.sf(3.0))
    assert skew_corrected_pvalue(-3.0, -0.2) > 2 * stats.norm.sf(3.0)  # negative skew: heavy lower tail
    assert skew_corrected_pvalue(3.0, -0.2) == pytest.approx(2 * stats.norm.sf(3.0))  # light side: floor
    assert skew_corrected_pvalue(0.1, 5.0) <= 1.0


def _exact_size(top: float, k: int, n: int, levels: tuple[float, ...]) -> tuple[list[float], list[float]]:
    """Exact size / level of temperature drift, normal p vs the function's p, on a two-point log p law.

    The law: one token of probability ``top`` and k of (1 - top) / k. log p(x) takes two values,
    so the sum is a function of the rare-token count ~ Binomial(n, 1 - top): the size is a finite sum.
    """
    p = np.r_[top, np.full(k, (1 - top) / k)]
    lp = np.log(p)
    mu = float((p * lp).sum())
    v = float((p * lp**2).sum() - mu**2)
    counts = np.arange(n + 1)
    weight = stats.binom.pmf(counts, n, 1 - top)
    normal, corrected = np.empty(n + 1), np.empty(n + 1)
    for c in counts:
        res = martingale_z(np.r_[np.full(c, lp[1]), np.full(n - c, lp[0])], np.full(n, mu), np.full(n, v), name="t")
        normal[c], corrected[c] = 2 * stats.norm.sf(abs(res.statistic)), res.pvalue
    return ([float(weight[normal <= a].sum() / a) for a in levels],
            [float(weight[corrected <= a].sum() / a) for a in levels])


@pytest.mark.parametrize(("top", "k", "n"), [(0.97, 30, 1200), (0.95, 100, 600)])
def test_skewed_log_p_sums_keep_their_size_in_the_tail(top: float, k: int, n: int) -> None:
    """Peaked laws, summed variance > 1 000 (above the guard): the normal p-value was 1.1-2.9x too
    liberal at 1e-3 .. 2e-5 (exact sizes); the skewness-corrected one is at most nominal."""
    levels = (1e-3, 1e-4, 2e-5)
    normal, corrected = _exact_size(top, k, n, levels)
    assert max(normal[1:]) > 1.9  # before: 2.2x / 2.1x at 1e-4, 2.0x / 2.9x at 2e-5
    assert max(corrected) <= 1.0, corrected
