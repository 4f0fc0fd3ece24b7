"""Black-box two-sample test of categorical counts: Pearson chi-square homogeneity.

Rare labels are merged into one ``other`` bin using the POOLED counts (and the fixed group
sizes) only: under H0, given the pooled multiset the group labels are exchangeable, so a
binning that is a function of the pooled counts keeps the Monte Carlo p-value exact and the
asymptotic one approximately valid. Choosing bins from per-group counts would not.

A label keeps its own bin when its expected count in the SMALLER group is at least
``min_expected`` (5): pooled >= 5 n / min(n_a, n_b). The ``other`` bin is folded into the
smallest kept bin when its own expected count is below that rule, so every bin of the
table meets Cochran's rule and the chi-square law applies. Only when fewer than two bins
survive is the unmerged table tested by Monte Carlo, with as many null tables as the level
it is compared at needs (:mod:`speceq.stats.montecarlo`).

Unequal groups: with groups of 3000 and 600 the chi-square law is too light in the tail
(measured 1.2-1.5x nominal at 1e-3 and 1e-4, R = 2 x 10^5; a stricter expected-count rule,
10 or 20 per bin in the smaller group, did not change that). So when the groups differ in size,
method ``"auto"`` recomputes a chi-square p-value below ``ASYMPTOTIC_P_FLOOR`` (0.01) by the
conditional Monte Carlo test of the same binned table (null tables with both margins fixed:
exact for every level), sized to the level it is compared at. Only a chi-square p-value
below ``level / TAIL_SHORTCUT`` (level / 10^4) is kept as it is: there the conditional
p-value would have to be 10^4 times the chi-square one to cross the level. The worst table
found (2 bins, 5 expected in the smaller group of 3000 + 600) has a ratio of about 30 at
chi-square p = 1e-6 and 200-300 near 1e-9. The size at any level u >= ``mc_level`` is
therefore at most u + P(chi-square p < mc_level / 10^4).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from scipy import stats

from speceq.stats._validate import as_counts, check_int, check_level, check_positive
from speceq.stats.montecarlo import DEFAULT_STOP_AFTER, conditional_tables, mc_draws_for_level, sequential_mc_pvalue
from speceq.stats.results import HomogeneityResult
from speceq.stats.tv import tv_distance, tv_upper_bound_two_sample

#: Default most Monte Carlo null tables when no comparison level is given.
DEFAULT_MC_SAMPLES = 9999
#: Smallest expected count per group that gives a label its own bin.
DEFAULT_MIN_EXPECTED = 5.0

#: With unequal groups, "auto" recomputes chi-square p-values below this by conditional Monte Carlo.
ASYMPTOTIC_P_FLOOR = 0.01
#: ... unless the chi-square p-value is below (comparison level) / TAIL_SHORTCUT: clearly significant.
TAIL_SHORTCUT = 1e4

_METHODS = ("auto", "asymptotic", "monte-carlo")


def _pooled_bins_iv(
    pooled: object, min_pooled: object, n_a: object, n_b: object, min_expected: object
) -> tuple[np.ndarray, float]:
    m = as_counts(pooled, "pooled")
    threshold = float(check_int(min_pooled, "min_pooled", minimum=1))
    if (n_a is None) != (n_b is None):
        raise ValueError("`n_a` and `n_b` must be given together")
    if n_a is not None:
        na = check_int(n_a, "n_a", minimum=1)
        nb = check_int(n_b, "n_b", minimum=1)
        if na + nb != int(m.sum()):
            raise ValueError(f"`n_a` + `n_b` = {na + nb} must equal the pooled total {int(m.sum())}")
        e = check_positive(min_expected, "min_expected", upper=1e12)
        threshold = max(threshold, e * (na + nb) / min(na, nb))
    return m, threshold


def pooled_bins(
    pooled: np.ndarray, min_pooled: int = 10, *, n_a: int | None = None, n_b: int | None = None,
    min_expected: float = DEFAULT_MIN_EXPECTED,
) -> np.ndarray:
    """Bin index of every label, chosen from pooled counts (and the group sizes) only.

    A label keeps a bin (0..K-1 in label order) when ``pooled >= threshold``, with threshold
    ``min_pooled``, raised to ``min_expected * n / min(n_a, n_b)`` when the group sizes are
    given (then its expected count in each group is >= min_expected). The other labels seen
    at least once share bin K, which is folded into the kept bin of smallest pooled count when
    its own pooled count is below the threshold. Labels never seen get -1. Returns int64 ``[labels]``.
    """
    m, threshold = _pooled_bins_iv(pooled, min_pooled, n_a, n_b, min_expected)
    kept = m >= threshold
    n_kept = int(kept.sum())
    bins = np.full(m.size, -1, dtype=np.int64)
    bins[kept] = np.arange(n_kept)
    rare = (~kept) & (m > 0)
    if rare.any():
        if n_kept and m[rare].sum() < threshold:
            kept_idx = np.flatnonzero(kept)
            smallest = kept_idx[int(np.argmin(m[kept_idx]))]  # first of the smallest, in label order
            bins[rare] = bins[smallest]
        else:
            bins[rare] = n_kept
    return bins


def _chisquare_homogeneity_iv(
    counts_a: object, counts_b: object, min_pooled: object, mc_samples: object, rng: object, method: object,
    tv_alpha: object, mc_level: object, mc_stop_after: object,
) -> tuple[np.ndarray, np.ndarray, int, int, np.random.Generator, str, float, float | None, int | None]:
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
    level = None if mc_level is None else check_level(mc_level, "mc_level")
    stop = None if mc_stop_after is None else check_int(mc_stop_after, "mc_stop_after", minimum=1)
    return a, b, min_pooled, mc_samples, rng, str(method), check_level(tv_alpha, "tv_alpha"), level, stop


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


def unequal_tail_needs_mc(asymptotic_p: float, mc_level: float | None, mc_samples: int = DEFAULT_MC_SAMPLES) -> bool:
    """Whether method "auto" replaces this chi-square p-value of unequal groups by the conditional Monte Carlo one.

    True when ``level / TAIL_SHORTCUT <= asymptotic_p < ASYMPTOTIC_P_FLOOR``; the level is
    ``mc_level``, else the smallest Monte Carlo p-value ``1 / (mc_samples + 1)``.
    """
    level = mc_level if mc_level is not None else 1.0 / (mc_samples + 1)
    return level / TAIL_SHORTCUT <= asymptotic_p < ASYMPTOTIC_P_FLOOR


def _tables(a: np.ndarray, pooled: np.ndarray, bins: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    used = bins >= 0
    n_bins = int(bins.max()) + 1 if used.any() else 0
    table_a = np.bincount(bins[used], weights=a[used], minlength=n_bins).astype(np.int64)
    table_m = np.bincount(bins[used], weights=pooled[used], minlength=n_bins).astype(np.int64)
    return table_a, table_m, n_bins


def chisquare_homogeneity(
    counts_a: np.ndarray,
    counts_b: np.ndarray,
    *,
    min_pooled: int = 10,
    mc_samples: int = DEFAULT_MC_SAMPLES,
    rng: np.random.Generator | None = None,
    method: Literal["auto", "asymptotic", "monte-carlo"] = "auto",
    tv_alpha: float = 0.05,
    mc_level: float | None = None,
    mc_stop_after: int | None = DEFAULT_STOP_AFTER,
) -> HomogeneityResult:
    """Pearson X^2 homogeneity test of two aligned count vectors, rare labels merged by pooled count.

    Bins: :func:`pooled_bins` with the group sizes, so every bin's expected count is >= 5 in
    each group and method ``"auto"`` uses the chi2(K-1) law. When fewer than two such bins
    exist, ``"auto"`` tests the unmerged table (labels seen at least once) by Monte Carlo:
    null tables drawn with both margins fixed (multivariate hypergeometric), at most
    ``max(mc_samples, 20 / mc_level)`` of them, stopping once ``mc_stop_after`` null X^2
    reach the observed one (Besag-Clifford; None: never stop early). ``mc_level`` is the
    smallest level the p-value will be compared at (e.g. alpha / m under Holm).
    With unequal groups, ``"auto"`` recomputes a chi-square p-value in
    [level / 10^4, 0.01) by the same conditional Monte Carlo on the binned table
    (:func:`unequal_tail_needs_mc`), because the chi-square tail is too light there.
    ``rng=None`` uses a fresh Generator seeded 0, so the p-value is a function of the data.
    The reported TV and its (1 - tv_alpha) upper bound use the unmerged labels.
    """
    a, b, min_pooled, mc_samples, rng, method, tv_alpha, mc_level, mc_stop_after = _chisquare_homogeneity_iv(
        counts_a, counts_b, min_pooled, mc_samples, rng, method, tv_alpha, mc_level, mc_stop_after
    )
    n_a, n_b = int(a.sum()), int(b.sum())
    pooled = a + b
    bins = pooled_bins(pooled, min_pooled, n_a=n_a, n_b=n_b)
    table_a, table_m, n_bins = _tables(a, pooled, bins)
    if n_bins < 2 and method != "asymptotic" and int((pooled > 0).sum()) >= 2:
        bins = pooled_bins(pooled, 1)  # too few bins meet the rule: the exact conditional test, unmerged
        table_a, table_m, n_bins = _tables(a, pooled, bins)
        method = "monte-carlo"
    used = bins >= 0
    own_bin = np.flatnonzero(used & (np.bincount(bins[used], minlength=max(n_bins, 1))[np.maximum(bins, 0)] == 1))
    merged_labels = int(used.sum()) - own_bin.size
    tv = tv_distance(a, b)
    common = dict(
        n=n_a + n_b, n_a=n_a, n_b=n_b, n_bins=n_bins, merged_labels=merged_labels, tv=tv,
        tv_upper_bound=tv_upper_bound_two_sample(tv, n_a, n_b, tv_alpha), tv_alpha=tv_alpha,
    )
    if n_bins < 2:
        return HomogeneityResult(statistic=0.0, pvalue=1.0, dof=0, method="degenerate", mc_samples=None, **common)

    statistic = float(_pearson_homogeneity(table_a.astype(np.float64), table_m, n_a, n_b))
    expected = np.concatenate([table_m * (n_a / (n_a + n_b)), table_m * (n_b / (n_a + n_b))])
    auto = method == "auto"
    if auto:
        method = "asymptotic" if _cochran_rule_holds(expected) else "monte-carlo"
    if method == "asymptotic":
        pvalue = float(stats.chi2.sf(statistic, n_bins - 1))
        used_mc = None
        if auto and n_a != n_b and unequal_tail_needs_mc(pvalue, mc_level, mc_samples):
            method = "monte-carlo"  # the chi-square tail is too light for unequal groups: exact conditional p
    if method == "monte-carlo":
        most = mc_samples if mc_level is None else max(mc_samples, mc_draws_for_level(mc_level))

        def draw(size: int) -> np.ndarray:
            return _pearson_homogeneity(conditional_tables(rng, table_m, n_a, size).astype(np.float64),
                                        table_m, n_a, n_b)

        pvalue, used_mc = sequential_mc_pvalue(statistic, draw, most, stop_after=mc_stop_after or most + 1,
                                               cells_per_draw=n_bins)

    dev = table_a - table_m * (n_a / (n_a + n_b))
    contrib = dev * dev / table_m
    order = np.argsort(-contrib, kind="stable")[:5]
    bin_label = np.full(n_bins, -1, dtype=np.int64)  # -1: a bin holding several labels
    bin_label[bins[own_bin]] = own_bin
    largest = tuple(int(bin_label[i]) for i in order if contrib[i] > 0)
    return HomogeneityResult(
        statistic=statistic, pvalue=pvalue, dof=n_bins - 1, method=method, mc_samples=used_mc,
        largest_cells=largest, **common,
    )
