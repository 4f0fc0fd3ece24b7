"""The checks speculative engines use today, re-implemented side by side, and the statistical limit.

These are RE-IMPLEMENTATIONS written for this project from the public descriptions below
(read for facts, not copied). Each works on the first generated token, whose target law p
is one fixed vector (the prompt's processed next-token law), as the originals do on one
synthetic distribution.

- vLLM, ``tests/v1/sample/test_rejection_sampler.py``
  ``test_rejection_sampling_approximates_target_distribution`` (vllm-project/vllm @004fce2):
  histograms of n_1 < ... < n_m samples (10 to 100 000 there, x10 steps), the L2 distance of
  each to the target p and (averaged) to 100 random reference laws softmax(U[0,1)^V); the
  test passes when the distance to the target shrinks 20 times more, first to last size,
  than the distance to the references. A heuristic, not a calibrated test.
- TensorRT-LLM, ``tests/unittest/_torch/speculative/test_torch_rejection_sampling.py``
  ``test_get_rejected_indices`` (NVIDIA/TensorRT-LLM @476ab24): 50 000 speculative and 50 000
  plain samples; passes when |KL(p || spec histogram) - KL(p || plain histogram)| < 0.01
  (``scipy.stats.entropy``). On a language model's full-support p an unseen token makes
  both KLs infinite and the gap NaN, so the check fails; :func:`trtllm_kl_gap` can merge
  rare tokens into bins from p (``bins``), an adaptation flagged as such.
- greedy exact match: run both engines at temperature 0 and require identical rows (the
  check most engines' CI runs). It cannot see a bug that only acts when sampling.
- Neyman-Pearson: with the mutant's exact law known, the likelihood ratio of the observed
  symbols is the most powerful level-alpha test (the statistical limit for those symbols).

Thresholds: each function implements the published pass/fail rule. For a fair comparison at
a fixed false-alarm level, :func:`null_threshold` calibrates any statistic's threshold by
simulation under H0 (draws from the exact p).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

#: vLLM's pass rule: distance to the target must shrink this many times more than to the references.
VLLM_MULTIPLIER = 20.0
#: Number of random reference laws in vLLM's test.
VLLM_REFERENCE_LAWS = 100
#: vLLM's smallest sample size and step between sizes.
VLLM_FIRST_SIZE = 10
VLLM_SIZE_STEP = 10
#: TensorRT-LLM's pass rule: |KL gap| below this (nats).
TRTLLM_KL_THRESHOLD = 0.01


@dataclass(frozen=True, slots=True, kw_only=True)
class MethodResult:
    """Outcome of one check on one sample. ``flagged``: the check says "not the target law"."""

    method: str
    flagged: bool
    statistic: float
    threshold: float
    n: int
    detail: str = ""

    def summary(self) -> str:
        verdict = "FLAGGED" if self.flagged else "passed"
        return f"{self.method}: {verdict} (statistic {self.statistic:.4g}, threshold {self.threshold:.4g}, n={self.n})"

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _probs_iv(p: object, name: str) -> np.ndarray:
    arr = np.asarray(p, dtype=np.float64)
    if arr.ndim != 1 or arr.size < 2 or not np.all(np.isfinite(arr)) or arr.min() < 0:
        raise ValueError(f"`{name}` must be a 1-D vector of >= 2 finite non-negative probabilities")
    total = float(arr.sum())
    if abs(total - 1.0) > 1e-4:
        raise ValueError(f"`{name}` sums to {total:.6g}, expected 1")
    return arr / total


def _tokens_iv(tokens: object, vocab: int, name: str) -> np.ndarray:
    arr = np.asarray(tokens)
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"`{name}` must be a 1-D integer array of token ids")
    if arr.size and (arr.min() < 0 or arr.max() >= vocab):
        raise ValueError(f"`{name}` holds ids outside [0, {vocab})")
    return arr.astype(np.int64, copy=False)


# ---- vLLM: L2 convergence heuristic --------------------------------------------------------
def vllm_reference_laws(vocab: int, rng: np.random.Generator, count: int = VLLM_REFERENCE_LAWS) -> np.ndarray:
    """``count`` random laws softmax(U[0,1)^vocab), float64 ``[count, vocab]`` (vLLM's references)."""
    x = np.exp(rng.random((count, vocab)))
    return x / x.sum(axis=1, keepdims=True)


def vllm_sizes(n: int) -> list[int]:
    """Nested sample sizes n / 10^j >= 10 (x10 steps, the last = n); at least two are needed."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"`n` must be an integer, got {type(n).__name__}")
    sizes = sorted({int(n) // VLLM_SIZE_STEP**j for j in range(8) if int(n) // VLLM_SIZE_STEP**j >= VLLM_FIRST_SIZE})
    if len(sizes) < 2:
        raise ValueError(f"`n` must be >= {VLLM_FIRST_SIZE * VLLM_SIZE_STEP} for two sample sizes, got {n}")
    return sizes


def vllm_statistic(nested_counts: np.ndarray, target_probs: np.ndarray, reference_laws: np.ndarray) -> tuple[float, float]:
    """(ratio to target, ratio to references): first-size over last-size L2 distance.

    nested_counts: ``[sizes, V]`` counts of nested samples (growing). Distances as in vLLM:
    ||p - h||_2 to the target, ||R - h||_F / rows(R) to the references (h = histogram).
    """
    counts = np.asarray(nested_counts, dtype=np.float64)
    hist = counts / counts.sum(axis=1, keepdims=True)  # [S, V]
    d_target = np.linalg.norm(hist - target_probs[None, :], axis=1)
    d_ref = np.sqrt(((reference_laws[None, :, :] - hist[:, None, :]) ** 2).sum(axis=(1, 2))) / reference_laws.shape[0]
    ratio_t = d_target[0] / d_target[-1] if d_target[-1] > 0 else math.inf
    return float(ratio_t), float(d_ref[0] / d_ref[-1])


def nested_counts_of(tokens: np.ndarray, sizes: list[int], vocab: int) -> np.ndarray:
    """Counts ``[len(sizes), vocab]`` of the first ``s`` tokens for each size ``s``."""
    return np.stack([np.bincount(tokens[:s], minlength=vocab) for s in sizes])


def vllm_l2_convergence(
    tokens: np.ndarray, target_probs: np.ndarray, *, rng: np.random.Generator, multiplier: float = VLLM_MULTIPLIER,
    threshold: float | None = None,
) -> MethodResult:
    """vLLM's heuristic on n first tokens (nested sizes :func:`vllm_sizes`).

    statistic = ratio to target / ratio to references; the published rule passes when it
    exceeds ``multiplier`` (20). ``threshold`` replaces that rule: flagged iff statistic <
    threshold (e.g. a level-alpha threshold from :func:`null_threshold`).
    """
    p = _probs_iv(target_probs, "target_probs")
    x = _tokens_iv(tokens, p.size, "tokens")
    sizes = vllm_sizes(x.size)
    refs = vllm_reference_laws(p.size, rng)
    ratio_t, ratio_r = vllm_statistic(nested_counts_of(x, sizes, p.size), p, refs)
    stat = ratio_t / ratio_r
    cut = multiplier if threshold is None else float(threshold)
    flagged = not stat > cut if threshold is None else stat < cut
    return MethodResult(method="vLLM L2 convergence", flagged=flagged, statistic=stat, threshold=cut, n=int(x.size),
                        detail=f"sizes {sizes}: distance to target shrank {ratio_t:.3g}x, to references {ratio_r:.3g}x")


# ---- TensorRT-LLM: KL gap -------------------------------------------------------------------
def kl_to_histogram(target_probs: np.ndarray, counts: np.ndarray) -> float:
    """KL(p || counts / n) in nats, as ``scipy.stats.entropy(p, h)``: inf when h = 0 where p > 0."""
    h = counts / counts.sum()
    support = target_probs > 0
    if np.any(h[support] == 0):
        return math.inf
    return float(np.sum(target_probs[support] * np.log(target_probs[support] / h[support])))


def kl_gap(target_probs: np.ndarray, spec_counts: np.ndarray, plain_counts: np.ndarray) -> float:
    """|KL(p || spec) - KL(p || plain)|; NaN when both are infinite (TensorRT-LLM's check then fails)."""
    a, b = kl_to_histogram(target_probs, spec_counts), kl_to_histogram(target_probs, plain_counts)
    if math.isinf(a) and math.isinf(b):
        return math.nan
    return abs(a - b)


def merge_bins(values: np.ndarray, bins: np.ndarray | None) -> np.ndarray:
    """Sum ``values`` ``[..., V]`` per bin; labels with bin -1 (p = 0) share one extra last bin.

    The extra bin keeps samples of zero-probability tokens in the histogram's total, as in
    the unbinned check (where they lower the histogram on p's support).
    """
    if bins is None:
        return values
    index = np.where(bins >= 0, bins, int(bins.max()) + 1)
    width = int(index.max()) + 1
    flat = np.atleast_2d(values)
    out = np.stack([np.bincount(index, weights=row, minlength=width) for row in flat])
    return out[0] if np.ndim(values) == 1 else out


def trtllm_kl_gap(
    spec_tokens: np.ndarray, plain_tokens: np.ndarray, target_probs: np.ndarray, *,
    bins: np.ndarray | None = None, threshold: float = TRTLLM_KL_THRESHOLD,
) -> MethodResult:
    """TensorRT-LLM's check: flagged unless |KL(p||spec) - KL(p||plain)| < ``threshold`` (NaN fails).

    ``bins`` (int ``[V]``, e.g. :func:`speceq.stats.probability_bins`; -1 for p = 0) merges
    tokens before the KLs (:func:`merge_bins`): an adaptation for full-support laws, not in
    the original.
    """
    p = _probs_iv(target_probs, "target_probs")
    s = _tokens_iv(spec_tokens, p.size, "spec_tokens")
    b = _tokens_iv(plain_tokens, p.size, "plain_tokens")
    if s.size == 0 or b.size == 0:
        raise ValueError("`spec_tokens` and `plain_tokens` must be non-empty")
    pb = merge_bins(p, bins)
    gap = kl_gap(pb, merge_bins(np.bincount(s, minlength=p.size).astype(float), bins),
                 merge_bins(np.bincount(b, minlength=p.size).astype(float), bins))
    flagged = not gap < threshold  # NaN compares false: the published check fails
    label = "TensorRT-LLM KL gap" + (" (binned)" if bins is not None else "")
    return MethodResult(method=label, flagged=flagged, statistic=gap, threshold=float(threshold), n=int(s.size),
                        detail=f"{pb.size} bins; NaN means both KLs are infinite (an unseen token)")


# ---- greedy exact match ---------------------------------------------------------------------
def greedy_exact_match(baseline_rows: np.ndarray, candidate_rows: np.ndarray) -> MethodResult:
    """Fraction of candidate rows equal to the baseline's greedy row of the same prompt.

    baseline_rows / candidate_rows: int ``[rows, L]`` padded token arrays of greedy runs
    (aligned rows). Flagged iff any row differs.
    """
    a, b = np.asarray(baseline_rows), np.asarray(candidate_rows)
    if a.shape != b.shape or a.ndim != 2 or a.shape[0] == 0:
        raise ValueError("`baseline_rows` and `candidate_rows` must be aligned non-empty 2-D arrays, "
                         f"got {a.shape} and {b.shape}")
    rate = float(np.mean(np.all(a == b, axis=1)))
    return MethodResult(method="greedy exact match", flagged=rate < 1.0, statistic=rate, threshold=1.0, n=int(a.shape[0]),
                        detail=f"{rate:.1%} of greedy rows identical to the baseline's")


# ---- Neyman-Pearson likelihood ratio ----------------------------------------------------------
@dataclass(frozen=True, slots=True)
class LogLikelihoodRatio:
    """log(alt / null) per symbol, split so that 0 * inf never occurs.

    finite: float64 ``[S]`` (0 where infinite); plus_inf / minus_inf: bool ``[S]``.
    """

    finite: np.ndarray
    plus_inf: np.ndarray
    minus_inf: np.ndarray

    @staticmethod
    def of(null_law: np.ndarray, alt_law: np.ndarray) -> LogLikelihoodRatio:
        p0 = np.asarray(null_law, dtype=np.float64).ravel()
        p1 = np.asarray(alt_law, dtype=np.float64).ravel()
        if p0.shape != p1.shape:
            raise ValueError(f"`null_law` and `alt_law` must be aligned, got {p0.shape} and {p1.shape}")
        both = (p0 > 0) & (p1 > 0)
        finite = np.zeros_like(p0)
        finite[both] = np.log(p1[both]) - np.log(p0[both])
        return LogLikelihoodRatio(finite, (p1 > 0) & (p0 == 0), (p0 > 0) & (p1 == 0))

    def total(self, counts: np.ndarray) -> np.ndarray:
        """Sum of log-ratios of each count vector (rows of ``counts`` ``[..., S]``): +-inf when due."""
        c = np.asarray(counts)
        out = c @ self.finite
        plus = (c[..., self.plus_inf] > 0).any(axis=-1)
        minus = (c[..., self.minus_inf] > 0).any(axis=-1)
        return np.where(plus, np.inf, np.where(minus, -np.inf, out))


def simulate_counts(law: np.ndarray, n: int, reps: int, rng: np.random.Generator, *, chunk: int = 64) -> np.ndarray:
    """``reps`` multinomial count vectors of ``n`` draws from ``law`` (flattened), int64 ``[reps, S]``."""
    p = np.asarray(law, dtype=np.float64).ravel()
    p = p / p.sum()
    parts = [rng.multinomial(n, p, size=min(chunk, reps - i)) for i in range(0, reps, chunk)]
    return np.concatenate(parts).astype(np.int64)


#: Above this many draws per repetition, LLR sums of large supports use the normal approximation.
CLT_MIN_N = 4096


def simulated_llr(
    llr: LogLikelihoodRatio, law: np.ndarray, n: int, reps: int, rng: np.random.Generator, *, chunk: int = 64
) -> np.ndarray:
    """Log-likelihood ratio totals of ``reps`` samples of ``n`` i.i.d. draws from ``law``, ``[reps]``.

    Draws are symbol indices (inverse CDF) for n <= :data:`CLT_MIN_N` or small supports
    (multinomial counts); beyond that, on a support over 4096 symbols without infinite
    ratios under ``law``, the sum is drawn from its normal approximation N(n mu, n sigma^2)
    (central limit theorem; exact mean and variance of one draw).
    """
    p = np.asarray(law, dtype=np.float64).ravel()
    p = p / p.sum()
    values = np.where(llr.plus_inf, np.inf, np.where(llr.minus_inf, -np.inf, llr.finite))
    if p.size <= CLT_MIN_N:
        return np.concatenate([llr.total(simulate_counts(p, n, min(chunk, reps - i), rng, chunk=chunk))
                               for i in range(0, reps, chunk)])
    if n <= CLT_MIN_N:
        cdf = np.cumsum(p)
        cdf /= cdf[-1]
        out = []
        for i in range(0, reps, chunk):
            idx = np.searchsorted(cdf, rng.random((min(chunk, reps - i), n)), side="right").clip(max=p.size - 1)
            out.append(values[idx].sum(axis=1))
        return np.concatenate(out)
    inf_mass = float(p[~np.isfinite(values)].sum())
    if inf_mass > 0:  # an impossible symbol under the other law: exact counts
        return np.concatenate([llr.total(simulate_counts(p, n, min(chunk, reps - i), rng, chunk=chunk))
                               for i in range(0, reps, chunk)])
    mean = float(p @ llr.finite)
    sd = float(np.sqrt(max(p @ llr.finite**2 - mean**2, 0.0)))
    return n * mean + np.sqrt(n) * sd * rng.standard_normal(reps)


def null_threshold(null_stats: np.ndarray, alpha: float, *, reject_large: bool = True) -> float:
    """Level-alpha threshold from statistics simulated under H0 (NaN counts as extreme evidence).

    reject_large: reject when statistic > threshold (the (1 - alpha) quantile); otherwise
    when statistic < threshold (the alpha quantile). Quantiles use the conservative order
    statistic, so the simulated rejection rate is at most alpha.
    """
    s = np.asarray(null_stats, dtype=np.float64)
    if s.ndim != 1 or s.size < 1 or not 0 < alpha < 1:
        raise ValueError("`null_stats` must be a non-empty 1-D array and `alpha` in (0, 1)")
    s = np.where(np.isnan(s), np.inf if reject_large else -np.inf, s)
    ordered = np.sort(s)
    m = int(math.floor(alpha * s.size))  # at most m null values may fall beyond the threshold
    if reject_large:
        return float(ordered[s.size - 1 - m])
    return float(ordered[m])


def rejection_rate(stats_h1: np.ndarray, threshold: float, *, reject_large: bool = True) -> float:
    """Fraction of statistics beyond ``threshold`` (NaN counts as a rejection)."""
    s = np.asarray(stats_h1, dtype=np.float64)
    s = np.where(np.isnan(s), np.inf if reject_large else -np.inf, s)
    return float(np.mean(s > threshold if reject_large else s < threshold))


def neyman_pearson_power(
    null_law: np.ndarray, alt_law: np.ndarray, n: int, alpha: float, rng: np.random.Generator, *,
    reps: int = 400, null_reps: int = 4000,
) -> tuple[float, float]:
    """(power, threshold) of the level-alpha likelihood-ratio test of ``n`` i.i.d. symbols.

    H0: symbols ~ ``null_law``; H1: symbols ~ ``alt_law`` (aligned laws over the same
    symbols, e.g. the joint law of the first two tokens). The threshold is the simulated
    (1 - alpha) quantile of the log-likelihood ratio under H0.
    """
    llr = LogLikelihoodRatio.of(null_law, alt_law)
    threshold = null_threshold(simulated_llr(llr, null_law, n, null_reps, rng), alpha)
    return rejection_rate(simulated_llr(llr, alt_law, n, reps, rng), threshold), threshold

