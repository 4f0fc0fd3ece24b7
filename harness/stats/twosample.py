"""Black-box two-sample test of categorical counts: Pearson chi-square homogeneity.

Rare labels are merged into one ``other`` bin using the POOLED counts only: under H0,
given the pooled multiset the group labels are exchangeable, so a binning that is a
function of the pooled counts keeps the Monte Carlo p-value exact and the asymptotic one
approximately valid. Choosing bins from per-group counts would not.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from scipy import stats

from speceq.stats._validate import as_counts, check_int, check_level
from speceq.stats.results import HomogeneityResult
from speceq.stats.tv import tv_distance, tv_upper_bound_two_sample

#: Default Monte Carlo null tables; p-values then have granularity 1 / 10_000.
DEFAULT_MC_SAMPLES = 9999

_METHODS = ("auto", "asymptotic", "monte-carlo")
_CHUNK_CELLS = 4_000_000  # null-table cells generated at once (~32 MB of int64)


def _pooled_bins_iv(pooled: object, min_pooled: object) -> tuple[np.ndarray, int]:
    return as_counts(pooled, "pooled"), check_int(min_pooled, "min_pooled", minimum=1)


def pooled_bins(pooled: np.ndarray, min_pooled: int = 10) -> np.ndarray:
    """Bin index of every label, chosen from pooled counts only.

    Labels with ``pooled >= min_pooled`` keep a bin each (0..K-1 in label order); the other
    labels seen at least once share the last bin K; labels never seen get -1 (dropped).
    Returns int64 ``[labels]``.
    """
    m, threshold = _pooled_bins_iv(pooled, min_pooled)
    kept = m >= threshold
    bins = np.full(m.size, -1, dtype=np.int64)
    bins[kept] = np.arange(int(kept.sum()))
    bins[(~kept) & (m > 0)] = int(kept.sum())
    return bins


def _chisquare_homogeneity_iv(
    counts_a: object, counts_b: object, min_pooled: object, mc_samples: object, rng: object, method: object, tv_alpha: object
) -> tuple[np.ndarray, np.ndarray, int, int, np.random.Generator, str, float]:
    a = as_counts(counts_a, "counts_a")
    b = as_counts(counts_b, "counts_b")
    if a.shape != b.shape:
        raise ValueError(f"`counts_a` and `counts_b` must be aligned, got lengths {a.size} and {b.size}")
    if a.sum() == 0 or b.sum() == 0:
        raise ValueError(f"each group needs at least one observation, got n_a={a.sum()}, n_b={b.sum()}")
    min_pooled = check_int(min_pooled, "min_pooled", minimum=1)
    mc_samples = check_int(mc_samples, "mc_samples", minimum=1)
    if rng is None:
        rng = np.random.default_rng(0)
    elif not isinstance(rng, np.random.Generator):
        raise TypeError(f"`rng` must be a numpy.random.Generator or None, got {type(rng).__name__}")
    if method not in _METHODS:
        raise ValueError(f"`method` must be one of {_METHODS}, got {method!r}")
    return a, b, min_pooled, mc_samples, rng, str(method), check_level(tv_alpha, "tv_alpha")


def _pearson_homogeneity(table_a: np.ndarray, pooled: np.ndarray, n_a: int, n_b: int) -> np.ndarray:
    """X^2 of 2 x K tables given group-a counts ``[..., K]`` and the fixed pooled counts ``[K]``.

    Uses (a - e_a)^2 (1/e_a + 1/e_b) = (a - e_a)^2 N^2 / (m n_a n_b), since b - e_b = -(a - e_a).
    """
    n = n_a + n_b
    dev = table_a - pooled * (n_a / n)
    return (dev * dev / pooled).sum(axis=-1) * (n * n / (n_a * n_b))


def _cochran_rule_holds(expected: np.ndarray) -> bool:
    """Cochran (1954): no expected count below 1 and at most 20% of them below 5."""
    e = np.asarray(expected, dtype=np.float64).ravel()
    return bool(e.size and e.min() >= 1.0 and np.mean(e < 5.0) <= 0.2)


def chisquare_homogeneity(
    counts_a: np.ndarray,
    counts_b: np.ndarray,
    *,
    min_pooled: int = 10,
    mc_samples: int = DEFAULT_MC_SAMPLES,
    rng: np.random.Generator | None = None,
    method: Literal["auto", "asymptotic", "monte-carlo"] = "auto",
    tv_alpha: float = 0.05,
) -> HomogeneityResult:
    """Pearson X^2 homogeneity test of two aligned count vectors, rare labels merged by pooled count.

    method ``"auto"`` uses the chi2(K-1) law when Cochran's rule holds for the 2 x K expected
    counts, else a Monte Carlo p = (1 + #{X*>=X}) / (B + 1) over ``mc_samples`` null tables
    drawn with both margins fixed (multivariate hypergeometric). ``rng=None`` uses a fresh
    Generator seeded 0, so the p-value is a function of the data; pass one for independence.
    The reported TV and its (1 - tv_alpha) upper bound use the unmerged labels.
    """
    a, b, min_pooled, mc_samples, rng, method, tv_alpha = _chisquare_homogeneity_iv(
        counts_a, counts_b, min_pooled, mc_samples, rng, method, tv_alpha
    )
    n_a, n_b = int(a.sum()), int(b.sum())
    pooled = a + b
    bins = pooled_bins(pooled, min_pooled)
    used = bins >= 0
    n_bins = int(bins.max()) + 1 if used.any() else 0
    table_a = np.bincount(bins[used], weights=a[used], minlength=n_bins).astype(np.int64)
    table_m = np.bincount(bins[used], weights=pooled[used], minlength=n_bins).astype(np.int64)
    kept = np.flatnonzero(pooled >= min_pooled)
    merged_labels = int(used.sum()) - kept.size
    tv = tv_distance(a, b)
    common = dict(
        n=n_a + n_b, n_a=n_a, n_b=n_b, n_bins=n_bins, merged_labels=merged_labels, tv=tv,
        tv_upper_bound=tv_upper_bound_two_sample(tv, n_a, n_b, tv_alpha), tv_alpha=tv_alpha,
    )
    if n_bins < 2:
        return HomogeneityResult(statistic=0.0, pvalue=1.0, dof=0, method="degenerate", mc_samples=None, **common)

    statistic = float(_pearson_homogeneity(table_a.astype(np.float64), table_m, n_a, n_b))
    expected = np.concatenate([table_m * (n_a / (n_a + n_b)), table_m * (n_b / (n_a + n_b))])
    if method == "auto":
        method = "asymptotic" if _cochran_rule_holds(expected) else "monte-carlo"
    if method == "asymptotic":
        pvalue = float(stats.chi2.sf(statistic, n_bins - 1))
        used_mc = None
    else:
        pvalue = _monte_carlo_pvalue(statistic, table_m, n_a, n_b, mc_samples, rng)
        used_mc = mc_samples

    dev = table_a - table_m * (n_a / (n_a + n_b))
    contrib = dev * dev / table_m
    order = np.argsort(-contrib, kind="stable")[:5]
    bin_to_label = np.append(kept, -1)  # the merged bin, when present, is the last one
    largest = tuple(int(bin_to_label[i]) if i < kept.size else -1 for i in order if contrib[i] > 0)
    return HomogeneityResult(
        statistic=statistic, pvalue=pvalue, dof=n_bins - 1, method=method, mc_samples=used_mc,
        largest_cells=largest, **common,
    )


def _monte_carlo_pvalue(
    statistic: float, pooled: np.ndarray, n_a: int, n_b: int, samples: int, rng: np.random.Generator
) -> float:
    """(1 + #{X*>=X}) / (B + 1) over null tables with the pooled counts and group sizes fixed."""
    tolerance = 1e-9 * max(1.0, statistic)  # equal tables must count as "as extreme"
    chunk = max(1, _CHUNK_CELLS // pooled.size)
    exceed = 0
    done = 0
    while done < samples:
        size = min(chunk, samples - done)
        null_a = rng.multivariate_hypergeometric(pooled, n_a, size=size)
        null_x2 = _pearson_homogeneity(null_a.astype(np.float64), pooled, n_a, n_b)
        exceed += int(np.count_nonzero(null_x2 >= statistic - tolerance))
        done += size
    return (1 + exceed) / (samples + 1)
