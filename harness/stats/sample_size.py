"""Sample sizes: power of the chi-square tests and certification of TV <= eps.

Detection: the one-sample chi-square with k bins has
noncentrality lambda = n w^2, and w^2 >= 4 delta^2 for a TV shift delta (equality for the
hardest, proportional shift). Solving ncx2.sf(chi2.ppf(1 - alpha, k - 1), k - 1, lambda) = power
gives n = lambda / (4 delta^2) oracle draws, and twice that per group for two samples.

Certification: "equivalent" needs the upper bound TV_hat + margin below eps. Under p = q
with effective support k_eff = (sum_i sqrt(p_i))^2, E[TV_hat] ~ sqrt(k_eff / (2 pi n)), and
McDiarmid's inequality puts TV_hat below its mean + sqrt(ln(1/(1-q)) / (2n)) with probability
q. So the bound falls below eps with probability >= q once
n = (sqrt(k_eff / (2 pi)) + sqrt(ln(1/alpha) / 2) + sqrt(ln(1/(1-q)) / 2))^2 / eps^2 draws
(oracle), twice that per group (two-sample). k_eff is estimated from counts with
:func:`effective_support_upper`, an upper estimate (the plug-in is biased low: it misses
unseen labels).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, stats

from speceq.stats._validate import as_counts, check_int, check_level, check_positive


def _noncentrality_for_power_iv(dof: object, alpha: object, power: object) -> tuple[int, float, float]:
    dof = check_int(dof, "dof", minimum=1)
    alpha = check_level(alpha, "alpha")
    power = check_level(power, "power")
    if power <= alpha:
        raise ValueError(f"`power` ({power}) must exceed `alpha` ({alpha})")
    return dof, alpha, power


def noncentrality_for_power(dof: int, alpha: float, power: float = 0.9) -> float:
    """The noncentrality lambda at which the level-alpha chi2(dof) test has the given power."""
    dof, alpha, power = _noncentrality_for_power_iv(dof, alpha, power)
    critical = stats.chi2.isf(alpha, dof)

    def shortfall(lam: float) -> float:
        return float(stats.ncx2.sf(critical, dof, lam)) - power

    high = 1.0
    while shortfall(high) < 0:
        high *= 2.0
    return float(optimize.brentq(shortfall, 0.0, high, xtol=1e-10, rtol=1e-12))


def _required_n_iv(delta_tv: object, k: object, alpha: object, power: object) -> tuple[float, int, float, float]:
    delta = check_positive(delta_tv, "delta_tv", upper=1.0)
    k = check_int(k, "k", minimum=2)
    alpha = check_level(alpha, "alpha")
    power = check_level(power, "power")
    if power <= alpha:
        raise ValueError(f"`power` ({power}) must exceed `alpha` ({alpha})")
    return delta, k, alpha, power


def required_n_oracle(delta_tv: float, k: int, alpha: float, power: float = 0.9) -> int:
    """Oracle draws for the k-bin goodness-of-fit chi-square to detect a TV shift ``delta_tv``."""
    delta, k, alpha, power = _required_n_iv(delta_tv, k, alpha, power)
    return math.ceil(noncentrality_for_power(k - 1, alpha, power) / (4.0 * delta * delta))


def required_n_two_sample(delta_tv: float, k: int, alpha: float, power: float = 0.9) -> int:
    """Samples PER GROUP for the 2 x k homogeneity chi-square to detect a TV shift ``delta_tv``."""
    delta, k, alpha, power = _required_n_iv(delta_tv, k, alpha, power)
    return math.ceil(2.0 * noncentrality_for_power(k - 1, alpha, power) / (4.0 * delta * delta))


def _required_n_equivalence_iv(tolerance: object, k: object, alpha: object) -> tuple[float, float, float]:
    tolerance = check_positive(tolerance, "tolerance", upper=1.0)
    if not isinstance(k, (int, float)) or isinstance(k, bool):
        raise TypeError(f"`k` must be a number (effective support), got {type(k).__name__}")
    if not 1.0 <= float(k) < math.inf:
        raise ValueError(f"`k` must be a finite effective support >= 1, got {k}")
    return tolerance, float(k), check_level(alpha, "alpha")


def _certification_n(tolerance: float, k: float, alpha: float, probability: float) -> float:
    spread = math.sqrt(math.log(1.0 / (1.0 - probability)) / 2.0) if probability > 0.5 else 0.0
    return (math.sqrt(k / (2.0 * math.pi)) + math.sqrt(math.log(1.0 / alpha) / 2.0) + spread) ** 2 / tolerance**2


def required_n_equivalence_oracle(tolerance: float, k: float, alpha: float, probability: float = 0.9) -> int:
    """Oracle draws for the TV upper bound to fall below ``tolerance`` with ``probability`` when p = q.

    ``probability`` 0.5 gives the size at which the MEAN bound reaches the tolerance.
    """
    tolerance, k, alpha = _required_n_equivalence_iv(tolerance, k, alpha)
    return math.ceil(_certification_n(tolerance, k, alpha, check_level(probability, "probability")))


def required_n_equivalence_two_sample(tolerance: float, k: float, alpha: float, probability: float = 0.9) -> int:
    """Samples PER GROUP for the two-sample TV bound to fall below ``tolerance`` with ``probability`` under H0."""
    tolerance, k, alpha = _required_n_equivalence_iv(tolerance, k, alpha)
    return math.ceil(2.0 * _certification_n(tolerance, k, alpha, check_level(probability, "probability")))


def effective_support_upper(counts: np.ndarray) -> float:
    """Upper estimate of k_eff = (sum_i sqrt(p_i))^2 from counts of one sample (>= 1).

    Seen labels contribute sqrt((c_i + 1) / n) (add-one); unseen labels are estimated from
    the singletons f1 and doubletons f2: mass M = f1 / n (Good-Turing) spread evenly over
    U = f1^2 / (2 f2) labels (Chao1; f1 (f1 - 1) / 2 when f2 = 0), contributing sqrt(M U).
    """
    c = as_counts(counts, "counts")
    n = int(c.sum())
    if n == 0:
        raise ValueError("`counts` must hold at least one observation")
    seen = c[c > 0].astype(np.float64)
    f1 = float(np.count_nonzero(seen == 1))
    f2 = float(np.count_nonzero(seen == 2))
    unseen_labels = f1 * f1 / (2.0 * f2) if f2 > 0 else f1 * (f1 - 1.0) / 2.0
    root = float(np.sqrt((seen + 1.0) / n).sum()) + math.sqrt((f1 / n) * unseen_labels)
    return max(1.0, root * root)
