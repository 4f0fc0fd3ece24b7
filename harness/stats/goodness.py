"""Chi-square goodness of fit of observed counts against the oracle's probabilities.

For the first generated token (one fixed prefix: the prompt) and for frequent prefixes.
Bins come from the probabilities and n alone, never from the data: labels are walked in
descending p and grouped until a group's expected count n p reaches ``min_expected`` (20,
so the chi-square law holds in the tail at the Holm levels of a run); the remaining tail,
however small, stays a bin of its own, so a sample that puts all its mass on tail tokens
is never hidden by merging.

The chi-square law is used only where it is accurate: when every bin expects at least
``min_expected`` AND the chi-square p-value is at least ``ASYMPTOTIC_P_FLOOR`` (0.01). Below
that, where decisions are made, the skewed multinomial tail is heavier than the chi-square
one (measured 2x nominal at 1e-3 for 2 bins expecting 2970 and 30), so the p-value is
recomputed under the known law: exactly for 2 bins (binomial), else by Monte Carlo
(multinomial tables of the bin probabilities) sized to the level it is compared at
(:mod:`speceq.stats.montecarlo`). For u < 0.01, P(p <= u) <= u exactly.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from speceq.stats._validate import as_counts, as_probs, check_int, check_level, check_positive
from speceq.stats.montecarlo import DEFAULT_STOP_AFTER, mc_draws_for_level, sequential_mc_pvalue
from speceq.stats.results import GoodnessOfFitResult
from speceq.stats.tv import tv_to_oracle, tv_upper_bound_oracle

#: Smallest expected count of a bin for the chi-square law to be used.
DEFAULT_MIN_EXPECTED = 20.0
#: Most Monte Carlo tables when no comparison level is given.
DEFAULT_MC_SAMPLES = 9999
#: Chi-square p-values below this are recomputed exactly / by Monte Carlo under the known law.
ASYMPTOTIC_P_FLOOR = 0.01


def _probability_bins_iv(probs: object, n: object, min_expected: object) -> tuple[np.ndarray, int, float]:
    return as_probs(probs, "probs"), check_int(n, "n", minimum=1), check_positive(min_expected, "min_expected", upper=1e12)


def probability_bins(probs: np.ndarray, n: int, min_expected: float = DEFAULT_MIN_EXPECTED) -> np.ndarray:
    """Bin index of every label from ``probs`` and the sample size ``n`` only.

    Labels ranked by descending p (ties by index) with n p_i >= ``min_expected`` get a bin
    each (0..K-1). The other labels with p_i > 0 (the tail) are grouped in rank order into
    bins of expected count between min_expected and 3 min_expected (a bin closes once the
    tail mass before a label passes a multiple of 2 min_expected; a short last group joins
    the previous one). When the whole tail is below ``min_expected`` it is still one bin of
    its own. Labels with p_i == 0 get -1. Returns int64 ``[labels]``.
    """
    p, n, min_expected = _probability_bins_iv(probs, n, min_expected)
    order = np.argsort(-p, kind="stable")
    order = order[p[order] > 0]
    bins = np.full(p.size, -1, dtype=np.int64)
    expected = n * p[order]
    n_big = int(np.count_nonzero(expected >= min_expected))  # a prefix: expected is sorted descending
    bins[order[:n_big]] = np.arange(n_big)
    tail = expected[n_big:]
    if tail.size:
        before = np.cumsum(tail) - tail
        group = np.floor(before / (2.0 * min_expected)).astype(np.int64)
        last = int(group[-1])
        if last > 0 and tail[group == last].sum() < min_expected:
            group[group == last] = last - 1
        bins[order[n_big:]] = n_big + group
    return bins


def _chisquare_gof_iv(
    counts: object, probs: object, min_expected: object, tv_alpha: object, mc_samples: object, rng: object,
    mc_level: object, mc_stop_after: object,
) -> tuple[np.ndarray, np.ndarray, float, float, int, np.random.Generator, float | None, int | None]:
    c = as_counts(counts, "counts")
    if c.sum() == 0:
        raise ValueError("`counts` must hold at least one observation")
    p = as_probs(probs, "probs", size=c.size)
    if rng is None:
        rng = np.random.default_rng(0)
    elif not isinstance(rng, np.random.Generator):
        raise TypeError(f"`rng` must be a numpy.random.Generator or None, got {type(rng).__name__}")
    level = None if mc_level is None else check_level(mc_level, "mc_level")
    stop = None if mc_stop_after is None else check_int(mc_stop_after, "mc_stop_after", minimum=1)
    return (c, p, check_positive(min_expected, "min_expected", upper=1e12), check_level(tv_alpha, "tv_alpha"),
            check_int(mc_samples, "mc_samples", minimum=1), rng, level, stop)


def chisquare_gof(
    counts: np.ndarray, probs: np.ndarray, *, min_expected: float = DEFAULT_MIN_EXPECTED, tv_alpha: float = 0.05,
    mc_samples: int = DEFAULT_MC_SAMPLES, rng: np.random.Generator | None = None, mc_level: float | None = None,
    mc_stop_after: int | None = DEFAULT_STOP_AFTER,
) -> GoodnessOfFitResult:
    """Pearson X^2 of ``counts`` against ``n * probs`` on bins from p (:func:`probability_bins`).

    ``counts`` and ``probs`` are aligned over the labels (e.g. the vocabulary); probs must
    sum to 1 (within 1e-4, then renormalised). p-value: chi2(K-1) when every bin's expected
    count is >= ``min_expected`` and that p is >= 0.01; else exact (binomial) for 2 bins, or
    Monte Carlo under the known law with at most ``max(mc_samples, 20 / mc_level)`` tables,
    stopping after ``mc_stop_after`` exceedances (Besag-Clifford). Any count on a label with p = 0 is a support violation: X^2 = inf,
    p = 0. Fewer than 2 bins (a point mass): no information, X^2 = 0, p = 1.
    """
    c, p, min_expected, tv_alpha, mc_samples, rng, mc_level, mc_stop_after = _chisquare_gof_iv(
        counts, probs, min_expected, tv_alpha, mc_samples, rng, mc_level, mc_stop_after
    )
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
        return GoodnessOfFitResult(statistic=float("inf"), pvalue=0.0, dof=max(n_bins - 1, 0), n_bins=n_bins,
                                   method="support", mc_samples=None, **common)
    if n_bins < 2:
        return GoodnessOfFitResult(statistic=0.0, pvalue=1.0, dof=0, n_bins=n_bins, method="degenerate",
                                   mc_samples=None, **common)
    observed = np.bincount(bins[used], weights=c[used], minlength=n_bins)
    bin_p = np.bincount(bins[used], weights=p[used], minlength=n_bins)
    bin_p = bin_p / bin_p.sum()
    expected = n * bin_p
    statistic = float(((observed - expected) ** 2 / expected).sum())
    asymptotic = float(stats.chi2.sf(statistic, n_bins - 1))
    if expected.min() >= min_expected and asymptotic >= ASYMPTOTIC_P_FLOOR:
        return GoodnessOfFitResult(statistic=statistic, pvalue=asymptotic, dof=n_bins - 1, n_bins=n_bins,
                                   method="asymptotic", mc_samples=None, **common)
    if n_bins == 2:
        return GoodnessOfFitResult(statistic=statistic, pvalue=_binomial_pvalue(observed[0], n, bin_p[0]),
                                   dof=1, n_bins=2, method="exact", mc_samples=None, **common)
    most = mc_samples if mc_level is None else max(mc_samples, mc_draws_for_level(mc_level))

    def draw(size: int) -> np.ndarray:
        table = rng.multinomial(n, bin_p, size=size).astype(np.float64)
        return ((table - expected) ** 2 / expected).sum(axis=-1)

    pvalue, used_mc = sequential_mc_pvalue(statistic, draw, most, stop_after=mc_stop_after or most + 1,
                                           cells_per_draw=n_bins)
    return GoodnessOfFitResult(statistic=statistic, pvalue=pvalue, dof=n_bins - 1, n_bins=n_bins, method="monte-carlo",
                               mc_samples=used_mc, **common)


def _binomial_pvalue(x: float, n: int, p: float) -> float:
    """P(|X - n p| >= |x - n p|) for X ~ Binomial(n, p): the exact p of the 2-bin Pearson X^2."""
    d = abs(x - n * p) * (1.0 - 1e-12)  # equal deviations count as "as extreme"
    low = np.floor(n * p - d)
    high = np.ceil(n * p + d)
    return float(min(1.0, stats.binom.cdf(low, n, p) + stats.binom.sf(high - 1, n, p)))
