"""Two-sample tests of sequence-level scalars (length, log-probability of a sequence).

Lengths are integers with heavy ties (they pile up at max_new_tokens), so scipy's
continuous-law p-values would be conservative and ``scipy.stats.kstest`` must never see a
discrete CDF. Two exact remedies:

- KS with random tie-breaking: values are replaced by their dense rank plus U(0,1) jitter,
  which keeps the order of distinct values and breaks ties uniformly at random. Under H0
  the pooled labels are exchangeable, so the jittered ranks of group a are a uniformly
  random subset and the continuous KS null law is exact.
- Cramér-von Mises (midranks, as scipy) with a permutation p-value.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from speceq.stats._validate import as_real_sample, check_int, check_rng
from speceq.stats.montecarlo import conditional_tables
from speceq.stats.results import TwoSampleResult

_CHUNK_CELLS = 2_000_000  # permutation-matrix cells handled at once


def _two_sample_iv(x: object, y: object, rng: object) -> tuple[np.ndarray, np.ndarray, np.random.Generator]:
    return as_real_sample(x, "x", min_size=1), as_real_sample(y, "y", min_size=1), check_rng(rng)


def _ks_2samp_jittered_iv(x: object, y: object, rng: object) -> tuple[np.ndarray, np.ndarray, np.random.Generator]:
    return _two_sample_iv(x, y, rng)


def ks_2samp_jittered(x: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> TwoSampleResult:
    """Two-sided two-sample KS test with ties broken at random (exact null law under H0).

    The statistic is the KS distance of the tie-broken samples; the p-value is scipy's
    ``ks_2samp`` (exact for small samples, asymptotic otherwise) on them.
    """
    xs, ys, rng = _ks_2samp_jittered_iv(x, y, rng)
    pooled = np.concatenate([xs, ys])
    dense = np.unique(pooled, return_inverse=True)[1].astype(np.float64)
    broken = dense + rng.random(pooled.size)
    res = stats.ks_2samp(broken[: xs.size], broken[xs.size :], method="auto")
    return TwoSampleResult(
        name="KS (ties broken at random)", statistic=float(res.statistic), pvalue=float(res.pvalue),
        n_a=xs.size, n_b=ys.size, method="ks_2samp on tie-broken ranks",
    )


def _cramervonmises_2samp_permutation_iv(
    x: object, y: object, rng: object, n_resamples: object
) -> tuple[np.ndarray, np.ndarray, np.random.Generator, int]:
    xs, ys, rng = _two_sample_iv(x, y, rng)
    if xs.size < 2 or ys.size < 2:
        raise ValueError(f"`x` and `y` need at least 2 values each, got {xs.size} and {ys.size}")
    return xs, ys, rng, check_int(n_resamples, "n_resamples", minimum=1)


def _cvm_u_labels(in_x: np.ndarray, sorted_ranks: np.ndarray, n_x: int, n_y: int) -> np.ndarray:
    """U = n_x sum (r_i - i)^2 + n_y sum (s_j - j)^2 for label rows ``in_x [..., N]`` in sorted order."""
    pos = np.arange(1, sorted_ranks.size + 1, dtype=np.float64)
    c_x = np.cumsum(in_x, axis=-1, dtype=np.float64)  # index i of each x element
    c_y = pos - c_x  # index j of each y element
    dx = (sorted_ranks - c_x) * in_x
    dy = (sorted_ranks - c_y) * (~in_x)
    return n_x * (dx * dx).sum(axis=-1) + n_y * (dy * dy).sum(axis=-1)


def _cvm_u_counts(in_x_counts: np.ndarray, sizes: np.ndarray, midranks: np.ndarray, n_x: int, n_y: int) -> np.ndarray:
    """U = n_x sum_i (r_i - i)^2 + n_y sum_j (s_j - j)^2 from the x-counts per tie group ``[..., G]``.

    Within tie group g (size s_g, midrank r_g) the x elements hold indices a+1..a+c (a = x
    elements in earlier groups, c = c_g), and sum_{k=1..c} (r - a - k)^2 =
    c b^2 - b c (c+1) + c (c+1)(2c+1) / 6 with b = r - a; likewise for y with d_g = s_g - c_g.
    """
    total = np.zeros(in_x_counts.shape[:-1])
    for counts, weight in ((in_x_counts.astype(np.float64), n_x), ((sizes - in_x_counts).astype(np.float64), n_y)):
        before = np.cumsum(counts, axis=-1) - counts
        b = midranks - before
        c = counts
        total = total + weight * (c * b * b - b * c * (c + 1) + c * (c + 1) * (2 * c + 1) / 6).sum(axis=-1)
    return total


def cramervonmises_2samp_permutation(
    x: np.ndarray, y: np.ndarray, rng: np.random.Generator, n_resamples: int = 999
) -> TwoSampleResult:
    """Two-sample Cramér-von Mises T (midranks for ties, as scipy) with a permutation p-value.

    p = (1 + #{T* >= T}) / (n_resamples + 1) over random relabellings of the pooled sample,
    exact under H0 whatever the ties.
    """
    xs, ys, rng, n_resamples = _cramervonmises_2samp_permutation_iv(x, y, rng, n_resamples)
    n_x, n_y = xs.size, ys.size
    values, group, sizes = np.unique(np.concatenate([xs, ys]), return_inverse=True, return_counts=True)
    midranks = np.cumsum(sizes) - (sizes - 1) / 2.0  # average rank of each tie group
    observed = np.bincount(group[:n_x], minlength=values.size)
    u_obs = float(_cvm_u_counts(observed, sizes, midranks, n_x, n_y))
    k, n = n_x * n_y, n_x + n_y
    statistic = u_obs / (k * n) - (4 * k - 1) / (6 * n)

    # A random relabelling of the pooled sample. With many ties (G groups << N values) it is
    # drawn as x-counts per tie group (multivariate hypergeometric, O(G) per resample);
    # otherwise as a permuted label vector in sorted order (O(N) per resample).
    use_counts = values.size <= n // 4
    sorted_ranks = np.repeat(midranks, sizes)  # midrank of each pooled value in sorted order
    sorted_in_x = np.argsort(group, kind="stable") < n_x  # which sorted values came from x
    tolerance = 1e-9 * max(1.0, u_obs)
    chunk = max(1, _CHUNK_CELLS // (values.size if use_counts else n))
    exceed = done = 0
    while done < n_resamples:
        size = min(chunk, n_resamples - done)
        if use_counts:
            null_u = _cvm_u_counts(conditional_tables(rng, sizes, n_x, size), sizes, midranks, n_x, n_y)
        else:
            labels = rng.permuted(np.broadcast_to(sorted_in_x, (size, n)), axis=1)
            null_u = _cvm_u_labels(labels, sorted_ranks, n_x, n_y)
        exceed += int(np.count_nonzero(null_u >= u_obs - tolerance))
        done += size
    return TwoSampleResult(
        name="Cramér-von Mises", statistic=float(statistic), pvalue=(1 + exceed) / (n_resamples + 1),
        n_a=n_x, n_b=n_y, method="permutation", n_resamples=n_resamples,
    )
