"""Randomized probability integral transform (PIT) and tests of uniformity.

u_t = F_t(x_t-) + V_t p_t(x_t), with the vocabulary ordered by descending p_t (ties by token
id) and V_t ~ U(0,1) from an independent generator. If every x_t is drawn from p_t given its
prefix, the u_t are i.i.d. Uniform(0, 1) (Rosenblatt 1952; Brockwell 2007). Sorting by p
turns temperature, truncation and argmax-leak bugs into monotone distortions of the CDF.

Anderson-Darling for a fully specified U(0,1) is computed here (scipy's ``anderson`` has
no uniform option; ``goodness_of_fit`` is Monte Carlo). Its p-value comes from the limiting
law A^2 = sum_j Z_j^2 / (j (j+1)):

- A^2 < 4: Marsaglia & Marsaglia, "Evaluating the Anderson-Darling distribution", J. Stat.
  Softw. 9(2), 2004: their short approximation of the limiting CDF (|error| < 2e-6) plus
  their finite-n correction.
- A^2 >= 4: the tail sqrt(3) erfc(sqrt(z)) (1 + 11/(36 z)), from the leading term Z_1^2/2 and
  E[exp(R)] = sqrt(3) for the rest R (tilted mean 11/18 gives the 1/z term); relative error
  < 0.2% against numerical inversion (Imhof) for 4 <= z <= 20. Marsaglia's short formula is
  not used there: it underestimates p by a factor 2 at z = 10 and by 1e13 at z = 15.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special, stats

from speceq.stats._validate import check_int, check_rng
from speceq.stats.results import PITResult, UniformityResult
from speceq.stats.scores import TokenScores

#: Switch from Marsaglia's CDF approximation to the analytic tail of the AD limiting law.
_AD_TAIL_FROM = 4.0


def _randomized_pit_iv(scores: object, rng: object) -> tuple[TokenScores, np.random.Generator]:
    if not isinstance(scores, TokenScores):
        raise TypeError(f"`scores` must be a TokenScores, got {type(scores).__name__}")
    return scores, check_rng(rng)


def randomized_pit(scores: TokenScores, rng: np.random.Generator) -> np.ndarray:
    """u = cdf_before + V * prob per token, V ~ U(0,1) from ``rng``; float64 ``[N]`` in [0, 1].

    With coarsened scores (``pit_mass`` set: a top-K oracle) the cell width is ``pit_mass``:
    the coarsened randomized PIT of :mod:`speceq.stats.coarse_pit`, also exactly U(0, 1) under H0.
    """
    scores, rng = _randomized_pit_iv(scores, rng)
    v = rng.random(len(scores))
    width = scores.prob if scores.pit_mass is None else scores.pit_mass
    u = np.asarray(scores.cdf_before, dtype=np.float64) + v * np.asarray(width, dtype=np.float64)
    return np.clip(u, 0.0, 1.0)


def _adinf_cdf(z: float) -> float:
    """Marsaglia & Marsaglia (2004) approximation of the limiting CDF of A^2 (valid for z < 4 here)."""
    if z < 0.01:
        return 0.0
    if z < 2.0:
        poly = 2.00012 + (0.247105 - (0.0649821 - (0.0347962 - (0.011672 - 0.00168691 * z) * z) * z) * z) * z
        return math.exp(-1.2337141 / z) / math.sqrt(z) * poly
    expo = 1.0776 - (2.30695 - (0.43424 - (0.082433 - (0.008056 - 0.0003146 * z) * z) * z) * z) * z
    return math.exp(-math.exp(expo))


def _finite_n_correction(n: int, x: float) -> float:
    """Marsaglia & Marsaglia (2004) error of the limiting CDF value ``x`` for sample size n."""
    c = 0.01265 + 0.1757 / n
    if x < c:
        t = x / c
        return math.sqrt(t) * (1.0 - t) * (49.0 * t - 102.0) * (0.0037 / n**3 + 0.00078 / n**2 + 0.00006 / n)
    if x < 0.8:
        t = (x - c) / (0.8 - c)
        g2 = -0.00022633 + (6.54034 - (14.6538 - (14.458 - (8.259 - 1.91864 * t) * t) * t) * t) * t
        return g2 * (0.04213 / n + 0.01365 / n**2)
    g3 = -130.2137 + (745.2337 - (1705.091 - (1950.646 - (1116.360 - 255.7844 * x) * x) * x) * x) * x
    return g3 / n


def _anderson_darling_uniform_sf_iv(statistic: object, n: object) -> tuple[float, int | None]:
    if not isinstance(statistic, (int, float, np.floating, np.integer)) or isinstance(statistic, bool):
        raise TypeError(f"`statistic` must be a real number, got {type(statistic).__name__}")
    z = float(statistic)
    if math.isnan(z) or z < 0:
        raise ValueError(f"`statistic` must be a non-negative number, got {z}")
    return z, (None if n is None else check_int(n, "n", minimum=1))


def anderson_darling_uniform_sf(statistic: float, n: int | None = None) -> float:
    """P(A^2 >= statistic) under a fully specified continuous null; ``n`` adds the finite-n fix."""
    z, n = _anderson_darling_uniform_sf_iv(statistic, n)
    if z >= _AD_TAIL_FROM:
        return float(min(1.0, math.sqrt(3.0) * special.erfc(math.sqrt(z)) * (1.0 + 11.0 / (36.0 * z))))
    cdf = _adinf_cdf(z)
    if n is not None and cdf > 0.0:
        cdf += _finite_n_correction(n, cdf)
    return float(min(1.0, max(0.0, 1.0 - cdf)))


def _anderson_darling_uniform_statistic_iv(u: object) -> np.ndarray:
    return _pit_uniformity_iv(u, 2)[0]


def anderson_darling_uniform_statistic(u: np.ndarray) -> float:
    """A^2 = -n - (1/n) sum (2i-1) [ln u_(i) + ln(1 - u_(n+1-i))] of values in [0, 1]."""
    u = _anderson_darling_uniform_statistic_iv(u)
    s = np.sort(np.clip(u, 1e-300, np.nextafter(1.0, 0.0)))
    n = s.size
    weights = 2.0 * np.arange(1, n + 1) - 1.0
    return float(-n - np.dot(weights, np.log(s) + np.log1p(-s[::-1])) / n)


def _pit_uniformity_iv(u: object, bins: object) -> tuple[np.ndarray, int]:
    arr = np.asarray(u)
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.floating):
        raise TypeError(f"`u` must be a 1-D float array, got {arr.dtype} shape {arr.shape}")
    if arr.size < 2:
        raise ValueError(f"`u` needs at least 2 values, got {arr.size}")
    if not np.all((arr >= 0.0) & (arr <= 1.0)):
        bad = int(np.flatnonzero(~((arr >= 0.0) & (arr <= 1.0)))[0])
        raise ValueError(f"`u` must lie in [0, 1], found {arr[bad]} at index {bad}")
    return arr.astype(np.float64, copy=False), check_int(bins, "bins", minimum=2)


def pit_uniformity(u: np.ndarray, *, bins: int = 20) -> PITResult:
    """KS, Cramér-von Mises, Anderson-Darling and histogram chi-square of ``u`` against U(0,1).

    The histogram has ``bins`` equal-width bins (kept for the report); its chi-square uses
    min(bins, n // 5) bins (at least 2) so that every expected count is at least 5 when n allows.
    """
    u, bins = _pit_uniformity_iv(u, bins)
    n = u.size
    ks = stats.kstest(u, "uniform")
    cvm = stats.cramervonmises(u, "uniform")
    a2 = anderson_darling_uniform_statistic(u)
    histogram = np.histogram(u, bins=bins, range=(0.0, 1.0))[0]
    test_bins = max(2, min(bins, n // 5))
    counts = histogram if test_bins == bins else np.histogram(u, bins=test_bins, range=(0.0, 1.0))[0]
    expected = n / test_bins
    x2 = float(((counts - expected) ** 2).sum() / expected)
    return PITResult(
        n=n,
        ks=UniformityResult(name="PIT Kolmogorov-Smirnov", statistic=float(ks.statistic), pvalue=float(ks.pvalue), n=n),
        cramervonmises=UniformityResult(
            name="PIT Cramér-von Mises", statistic=float(cvm.statistic), pvalue=float(min(1.0, max(0.0, cvm.pvalue))), n=n
        ),
        anderson_darling=UniformityResult(
            name="PIT Anderson-Darling", statistic=a2, pvalue=anderson_darling_uniform_sf(a2, n), n=n
        ),
        histogram_chi2=UniformityResult(
            name="PIT histogram chi2", statistic=x2, pvalue=float(stats.chi2.sf(x2, test_bins - 1)), n=n, dof=test_bins - 1
        ),
        histogram=tuple(int(c) for c in histogram),
    )
