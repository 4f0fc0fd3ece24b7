"""The re-implemented engine checks behave as their sources describe, on toy laws (numpy only)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from speceq.power.methods import (
    CLT_MIN_N,
    LogLikelihoodRatio,
    greedy_exact_match,
    merge_bins,
    neyman_pearson_power,
    null_threshold,
    rejection_rate,
    simulated_llr,
    trtllm_kl_gap,
    vllm_l2_convergence,
    vllm_sizes,
)
from speceq.power.simulate import first_token_rates


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def draw(law: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    return rng.choice(law.size, size=n, p=law)


# ---- vLLM: L2 convergence ----------------------------------------------------------------------
def test_vllm_sizes_step_by_ten_up_to_n() -> None:
    assert vllm_sizes(100_000) == [10, 100, 1_000, 10_000, 100_000]
    assert vllm_sizes(2_500) == [25, 250, 2_500]
    with pytest.raises(ValueError, match="n"):
        vllm_sizes(50)


def test_vllm_passes_an_exact_sampler_over_its_own_range() -> None:
    """vLLM's setting: V = 10, softmax(U[0,1)) target, sizes 10..100 000: the exact sampler passes."""
    rng = np.random.default_rng(0)
    target = softmax(rng.random(10))
    res = vllm_l2_convergence(draw(target, 100_000, rng), target, rng=rng)
    assert not res.flagged and res.statistic > 20


def test_vllm_flags_a_biased_sampler_and_a_short_range() -> None:
    rng = np.random.default_rng(1)
    target = softmax(rng.random(10) * 3)
    biased = 0.7 * target + 0.3 * np.eye(10)[int(np.argmin(target))]
    assert vllm_l2_convergence(draw(biased, 100_000, rng), target, rng=rng).flagged
    # the published rule needs a wide range of sizes: 10..1000 fails even an exact sampler
    assert vllm_l2_convergence(draw(target, 1_000, rng), target, rng=rng).flagged


# ---- TensorRT-LLM: KL gap -----------------------------------------------------------------------
def trt_laws(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """TensorRT-LLM's setting: V = 500, the 400 smallest of U[0,1) zeroed in draft and target."""
    def law() -> np.ndarray:
        x = rng.random(500)
        x[np.argsort(x)[:400]] = 0.0
        return x / x.sum()
    return law(), law()


def speculative(target: np.ndarray, draft: np.ndarray, n: int, rng: np.random.Generator, *, bug: bool) -> np.ndarray:
    """One-token speculative sampling; ``bug`` resamples from the target instead of the residual."""
    residual = np.clip(target - draft, 0, None)
    residual /= residual.sum()
    d = draw(draft, n, rng)
    accept = rng.random(n) < np.minimum(1.0, target[d] / draft[d])
    replacement = draw(target if bug else residual, n, rng)
    return np.where(accept, d, replacement)


def test_trtllm_passes_the_exact_sampler_and_flags_the_residual_bug() -> None:
    rng = np.random.default_rng(2)
    target, draft = trt_laws(rng)
    plain = draw(target, 50_000, rng)
    assert not trtllm_kl_gap(speculative(target, draft, 50_000, rng, bug=False), plain, target).flagged
    res = trtllm_kl_gap(speculative(target, draft, 50_000, rng, bug=True), plain, target)
    assert res.flagged and res.statistic > 0.01


def test_trtllm_fails_on_a_full_support_law_unless_binned() -> None:
    rng = np.random.default_rng(3)
    target = softmax(rng.normal(size=300) * 3)  # many tokens of tiny probability: never all seen
    plain, spec = draw(target, 5_000, rng), draw(target, 5_000, rng)
    res = trtllm_kl_gap(spec, plain, target)
    assert res.flagged and math.isnan(res.statistic)
    from speceq.stats import probability_bins

    binned = trtllm_kl_gap(spec, plain, target, bins=probability_bins(target, 5_000, 25.0))
    assert math.isfinite(binned.statistic) and not binned.flagged


def test_merge_bins_keeps_zero_probability_mass_in_its_own_bin() -> None:
    bins = np.array([0, 0, 1, -1])
    np.testing.assert_array_equal(merge_bins(np.array([1.0, 2.0, 3.0, 4.0]), bins), [3.0, 3.0, 4.0])


# ---- greedy exact match ---------------------------------------------------------------------------
def test_greedy_exact_match_rate() -> None:
    rows = np.array([[1, 2, 3], [4, 5, -1]])
    assert not greedy_exact_match(rows, rows.copy()).flagged
    other = rows.copy()
    other[1, 1] = 9
    res = greedy_exact_match(rows, other)
    assert res.flagged and res.statistic == 0.5


# ---- thresholds and the Neyman-Pearson limit --------------------------------------------------------
def test_null_threshold_keeps_the_level() -> None:
    rng = np.random.default_rng(4)
    null = rng.normal(size=2000)
    cut = null_threshold(null, 0.01)
    assert rejection_rate(null, cut) <= 0.01
    assert rejection_rate(rng.normal(size=20_000), cut) == pytest.approx(0.01, abs=0.006)
    low = null_threshold(null, 0.05, reject_large=False)
    assert rejection_rate(null, low, reject_large=False) <= 0.05


def test_neyman_pearson_power_grows_with_n_and_holds_alpha_under_h0() -> None:
    rng = np.random.default_rng(5)
    null = softmax(rng.normal(size=50))
    alt = 0.9 * null + 0.1 * softmax(rng.normal(size=50))
    same, _ = neyman_pearson_power(null, null, 500, 0.05, rng, reps=1000, null_reps=2000)
    assert same <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 1000)
    powers = [neyman_pearson_power(null, alt, n, 0.05, rng, reps=300, null_reps=1000)[0] for n in (50, 500, 5000)]
    assert powers[0] < powers[1] < powers[2] and powers[2] > 0.9


def test_an_impossible_symbol_is_detected_with_certainty() -> None:
    rng = np.random.default_rng(6)
    null = np.array([0.5, 0.5, 0.0])
    alt = np.array([0.4, 0.4, 0.2])
    llr = LogLikelihoodRatio.of(null, alt)
    assert llr.plus_inf.tolist() == [False, False, True]
    power, _ = neyman_pearson_power(null, alt, 50, 0.01, rng, reps=200, null_reps=1000)
    assert power == 1.0


def test_large_supports_use_index_draws_or_the_normal_approximation_consistently() -> None:
    rng = np.random.default_rng(7)
    S = CLT_MIN_N + 1000
    null = softmax(rng.normal(size=S))
    alt = 0.8 * null + 0.2 * softmax(rng.normal(size=S))
    llr = LogLikelihoodRatio.of(null, alt)
    mean = float(alt @ llr.finite)
    for n in (CLT_MIN_N, 2 * CLT_MIN_N):  # exact index draws, then the normal approximation
        sums = simulated_llr(llr, alt, n, 150, rng)
        assert sums.mean() / n == pytest.approx(mean, rel=0.05)


# ---- the simulated first-token rates ---------------------------------------------------------------
def test_first_token_rates_under_h0_stay_near_alpha_and_detect_a_shift() -> None:
    rng = np.random.default_rng(8)
    target = softmax(rng.normal(size=40) * 2)
    joint = np.outer(target, target)
    null = first_token_rates(target, n=2000, alpha=0.05, rng=rng, null_reps=1000, law=target,
                             joint=(joint, joint), reps=400)
    bound = 0.05 + 3 * math.sqrt(0.05 * 0.95 / 400)
    assert null["np"] <= bound and null["vllm"] <= bound and null["trtllm"] <= bound
    shifted = 0.8 * target + 0.2 * np.eye(40)[0]
    alt = first_token_rates(target, n=2000, alpha=0.05, rng=rng, null_reps=1000, law=shifted,
                            joint=(joint, np.outer(shifted, target)), reps=200)
    assert alt["np"] == 1.0 and alt["trtllm"] > 0.9
    tokens = np.stack([draw(shifted, 2000, rng) for _ in range(20)])
    plain = np.stack([draw(target, 2000, rng) for _ in range(20)])
    on_samples = first_token_rates(target, n=2000, alpha=0.05, rng=rng, null_reps=1000, candidate_tokens=tokens,
                                   plain_tokens=plain)
    assert "np" not in on_samples and on_samples["trtllm"] > 0.9
