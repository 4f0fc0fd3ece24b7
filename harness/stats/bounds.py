"""Tail bounds shared by the comparisons and their result objects (no imports of other result code).

- :func:`signflip_tail_bound`: Bentkus & Dzindzalieta (Bernoulli 21(2), 2015), the optimal
  Gaussian bound for weighted Rademacher sums: P(sum a_i eps_i >= x) <= c* (1 - Phi(x)) for
  sum a_i^2 <= 1, c* = 1 / (4 P(N(0, 1) >= sqrt 2)) ~ 3.178.
- :func:`newcombe_interval`: Newcombe's hybrid score interval for a difference of proportions.
"""

from __future__ import annotations

import math

from scipy import special, stats

from speceq.stats._validate import check_level

#: Bentkus-Dzindzalieta constant: P(weighted Rademacher sum >= x) <= BD_CONSTANT * (1 - Phi(x)).
BD_CONSTANT = 1.0 / (4.0 * float(stats.norm.sf(math.sqrt(2.0))))


def signflip_tail_bound(x: float) -> float:
    """Upper bound on P(sum a_i eps_i >= x) for any weights with sum a_i^2 <= 1 (Bentkus-Dzindzalieta).

    min(1, c* (1 - Phi(x))), also capped at 1/2 for x > 0 (the law is symmetric).
    """
    x = float(x)
    if math.isnan(x):
        raise ValueError("`x` is NaN")
    bound = min(1.0, BD_CONSTANT * float(stats.norm.sf(x)))
    return min(bound, 0.5) if x > 0 else bound


def newcombe_interval(k1: int, n1: int, k2: int, n2: int, level: float = 0.95) -> tuple[float, float]:
    """Newcombe's hybrid score interval for p1 - p2 (Wilson intervals of each proportion)."""
    level = check_level(level, "level")
    z = float(special.ndtri(0.5 + level / 2))

    def wilson(k: int, n: int) -> tuple[float, float]:
        if n == 0:
            return 0.0, 1.0
        ph = k / n
        centre = (ph + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(ph * (1 - ph) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return max(0.0, centre - half), min(1.0, centre + half)

    p1 = k1 / n1 if n1 else 0.0
    p2 = k2 / n2 if n2 else 0.0
    l1, u1 = wilson(k1, n1)
    l2, u2 = wilson(k2, n2)
    d = p1 - p2
    return (d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2), d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2))
