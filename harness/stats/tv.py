"""Effect sizes: plug-in total variation distance and its distribution-free upper bounds.

The plug-in TV is biased upward (Jensen), and McDiarmid's inequality bounds its deviation
from its mean, so ``TV_hat + margin`` is a valid upper confidence bound for the true TV
(docs/explanation/statistics.md). Bounds are capped at 1, the largest possible TV, which keeps
them valid.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from speceq.stats._validate import as_counts, as_probs, check_int, check_level


def _tv_distance_iv(counts_a: object, counts_b: object) -> tuple[np.ndarray, np.ndarray]:
    a = as_counts(counts_a, "counts_a")
    b = as_counts(counts_b, "counts_b")
    if a.shape != b.shape:
        raise ValueError(f"`counts_a` and `counts_b` must be aligned, got lengths {a.size} and {b.size}")
    if a.sum() == 0 or b.sum() == 0:
        raise ValueError("`counts_a` and `counts_b` must each hold at least one observation")
    return a, b


def tv_distance(counts_a: np.ndarray, counts_b: np.ndarray) -> float:
    """Plug-in TV = 1/2 sum |a_i/n_a - b_i/n_b| of two aligned count vectors (in [0, 1])."""
    a, b = _tv_distance_iv(counts_a, counts_b)
    # clipped: summing rounded terms can give 1 + 2e-16 for disjoint samples
    return float(min(1.0, 0.5 * np.abs(a / a.sum() - b / b.sum()).sum()))


def _tv_to_oracle_iv(counts: object, probs: object) -> tuple[np.ndarray, np.ndarray]:
    c = as_counts(counts, "counts")
    if c.sum() == 0:
        raise ValueError("`counts` must hold at least one observation")
    p = as_probs(probs, "probs", size=c.size)
    return c, p


def tv_to_oracle(counts: np.ndarray, probs: np.ndarray) -> float:
    """Plug-in TV between the empirical law of ``counts`` and the known ``probs`` (aligned)."""
    c, p = _tv_to_oracle_iv(counts, probs)
    return float(min(1.0, 0.5 * np.abs(c / c.sum() - p).sum()))


def _tv_upper_bound_iv(tv: object, alpha: object) -> tuple[float, float]:
    if not isinstance(tv, (int, float, np.floating, np.integer)) or isinstance(tv, bool):
        raise TypeError(f"`tv` must be a real number, got {type(tv).__name__}")
    t = float(tv)
    if not 0.0 <= t <= 1.0:
        raise ValueError(f"`tv` must lie in [0, 1], got {t}")
    return t, check_level(alpha, "alpha")


def tv_upper_bound_two_sample(tv: float, n1: int, n2: int, alpha: float) -> float:
    """Upper (1 - alpha) bound on TV: tv + sqrt((1/n1 + 1/n2) ln(1/alpha) / 2), capped at 1."""
    t, a = _tv_upper_bound_iv(tv, alpha)
    n1 = check_int(n1, "n1", minimum=1)
    n2 = check_int(n2, "n2", minimum=1)
    return min(1.0, t + math.sqrt((1.0 / n1 + 1.0 / n2) * math.log(1.0 / a) / 2.0))


def tv_upper_bound_oracle(tv: float, n: int, alpha: float) -> float:
    """Upper (1 - alpha) bound on TV(q, p) from n draws of q: tv + sqrt(ln(1/alpha) / (2n)), capped at 1."""
    t, a = _tv_upper_bound_iv(tv, alpha)
    n = check_int(n, "n", minimum=1)
    return min(1.0, t + math.sqrt(math.log(1.0 / a) / (2.0 * n)))


def _tv_upper_bound_row_mismatch_iv(diverging: object, rows: object, alpha: object) -> tuple[int, int, float]:
    rows = check_int(rows, "rows", minimum=1)
    d = check_int(diverging, "diverging", minimum=0)
    if d > rows:
        raise ValueError(f"`diverging` ({d}) exceeds `rows` ({rows})")
    return d, rows, check_level(alpha, "alpha")


def tv_upper_bound_row_mismatch(diverging: int, rows: int, alpha: float) -> float:
    """Upper (1 - alpha) bound on TV from ``diverging`` of ``rows`` independent row pairs that differ.

    For any coupling P(X != Y) >= TV(law X, law Y); this is the one-sided Clopper-Pearson
    upper bound on P(X != Y), so never 0 (it is 1 - alpha^(1/rows) when no pair differs).
    """
    d, n, a = _tv_upper_bound_row_mismatch_iv(diverging, rows, alpha)
    if d == n:
        return 1.0
    return float(min(1.0, stats.beta.ppf(1.0 - a, d + 1, n - d)))
