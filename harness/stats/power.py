"""Sample sizes: power of the chi-square tests and certification of TV <= eps.

Detection: the one-sample chi-square with k bins has
noncentrality lambda = n w^2, and w^2 >= 4 delta^2 for a TV shift delta (equality for the
hardest, proportional shift). Solving ncx2.sf(chi2.ppf(1 - alpha, k - 1), k - 1, lambda) = power
gives n = lambda / (4 delta^2) oracle draws, and twice that per group for two samples.

Certification: "equivalent" needs the upper bound TV_hat + margin below eps.
Under p = q with effective support k_eff = (sum_i sqrt(p_i))^2, E[TV_hat] ~
sqrt(k_eff / (2 pi n)), so n = (sqrt(k_eff / (2 pi)) + sqrt(ln(1/alpha) / 2))^2 / eps^2 draws
(oracle), twice that per group (two-sample).
"""

from __future__ import annotations

import math

from scipy import optimize, stats

from speceq.stats._validate import check_int, check_level, check_positive


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


def _certification_n(tolerance: float, k: float, alpha: float) -> float:
    return (math.sqrt(k / (2.0 * math.pi)) + math.sqrt(math.log(1.0 / alpha) / 2.0)) ** 2 / tolerance**2


def required_n_equivalence_oracle(tolerance: float, k: float, alpha: float) -> int:
    """Oracle draws for the TV upper bound to fall below ``tolerance`` when truly p = q."""
    tolerance, k, alpha = _required_n_equivalence_iv(tolerance, k, alpha)
    return math.ceil(_certification_n(tolerance, k, alpha))


def required_n_equivalence_two_sample(tolerance: float, k: float, alpha: float) -> int:
    """Samples PER GROUP for the two-sample TV upper bound to fall below ``tolerance`` under H0."""
    tolerance, k, alpha = _required_n_equivalence_iv(tolerance, k, alpha)
    return math.ceil(2.0 * _certification_n(tolerance, k, alpha))
