"""Chi-square goodness of fit of observed counts against the oracle's probabilities.

For the first generated token (one fixed prefix: the prompt) and for frequent prefixes.
Bins come from the probabilities alone, never from the data: labels with expected count
n p_i >= ``min_expected`` keep a bin each and the tail is merged by p.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from speceq.stats._validate import as_counts, as_probs, check_int, check_level, check_positive
from speceq.stats.results import GoodnessOfFitResult
from speceq.stats.tv import tv_to_oracle, tv_upper_bound_oracle


def _probability_bins_iv(probs: object, n: object, min_expected: object) -> tuple[np.ndarray, int, float]:
    return as_probs(probs, "probs"), check_int(n, "n", minimum=1), check_positive(min_expected, "min_expected", upper=1e12)


def probability_bins(probs: np.ndarray, n: int, min_expected: float = 5.0) -> np.ndarray:
    """Bin index of every label from ``probs`` and the sample size ``n`` only.

    Labels are ranked by descending p (ties by index). Those with n p_i >= min_expected get
    a bin each (0..K-1 in that rank order); the other labels with p_i > 0 share bin K, which
    is folded into bin K-1 when its own expected count is below ``min_expected``. Labels with
    p_i == 0 get -1. Returns int64 ``[labels]``.
    """
    p, n, min_expected = _probability_bins_iv(probs, n, min_expected)
    expected = n * p
    order = np.argsort(-p, kind="stable")
    kept_sorted = order[expected[order] >= min_expected]
    bins = np.full(p.size, -1, dtype=np.int64)
    bins[kept_sorted] = np.arange(kept_sorted.size)
    tail = (expected < min_expected) & (p > 0)
    if tail.any():
        tail_bin = kept_sorted.size
        if kept_sorted.size and expected[tail].sum() < min_expected:
            tail_bin -= 1
        bins[tail] = tail_bin
    return bins


def _chisquare_gof_iv(
    counts: object, probs: object, min_expected: object, tv_alpha: object
) -> tuple[np.ndarray, np.ndarray, float, float]:
    c = as_counts(counts, "counts")
    if c.sum() == 0:
        raise ValueError("`counts` must hold at least one observation")
    p = as_probs(probs, "probs", size=c.size)
    return c, p, check_positive(min_expected, "min_expected", upper=1e12), check_level(tv_alpha, "tv_alpha")


def chisquare_gof(
    counts: np.ndarray, probs: np.ndarray, *, min_expected: float = 5.0, tv_alpha: float = 0.05
) -> GoodnessOfFitResult:
    """Pearson X^2 of ``counts`` against ``n * probs`` on bins from p (chi2(K-1) p-value).

    ``counts`` and ``probs`` are aligned over the labels (e.g. the vocabulary); probs must
    sum to 1 (within 1e-4, then renormalised). Any count on a label with p = 0 is a support
    violation: X^2 = inf, p = 0. Fewer than 2 bins: no information, X^2 = 0, p = 1.
    """
    c, p, min_expected, tv_alpha = _chisquare_gof_iv(counts, probs, min_expected, tv_alpha)
    n = int(c.sum())
    violations = int(c[p == 0].sum())
    tv = tv_to_oracle(c, p)
    common = dict(
        n=n, support_violations=violations, tv=tv, tv_upper_bound=tv_upper_bound_oracle(tv, n, tv_alpha), tv_alpha=tv_alpha
    )
    bins = probability_bins(p, n, min_expected)
    used = bins >= 0
    n_bins = int(bins.max()) + 1 if used.any() else 0
    if violations:
        return GoodnessOfFitResult(statistic=float("inf"), pvalue=0.0, dof=max(n_bins - 1, 0), n_bins=n_bins, **common)
    if n_bins < 2:
        return GoodnessOfFitResult(statistic=0.0, pvalue=1.0, dof=0, n_bins=n_bins, **common)
    observed = np.bincount(bins[used], weights=c[used], minlength=n_bins)
    expected = n * np.bincount(bins[used], weights=p[used], minlength=n_bins)
    statistic = float(((observed - expected) ** 2 / expected).sum())
    return GoodnessOfFitResult(
        statistic=statistic, pvalue=float(stats.chi2.sf(statistic, n_bins - 1)), dof=n_bins - 1, n_bins=n_bins, **common
    )
