"""Binomial-tail checks of rejection counts: a stated tolerated factor, and the replicates it takes.

A size check counts the rejections of R independent null replicates. ``rejection_limit``
is the most rejections a test whose true size is ``factor * level`` exceeds with probability
at most ``eps``; a check asserting ``count <= rejection_limit(...)`` therefore fails a test of
size <= factor * level with probability <= eps. ``reps_to_catch`` is the smallest R at which
the same check also fails a test ``liberal`` times too liberal with probability >= 1 - miss.
"""

from __future__ import annotations

from scipy import stats

#: Probability that a check fails a test whose size is within the tolerated factor.
FALSE_FAIL = 1e-6
#: Largest probability that a check passes a test as liberal as it is sized to catch.
MISS = 0.01


def rejection_limit(reps: int, level: float, factor: float, eps: float = FALSE_FAIL) -> int:
    """The (1 - eps) quantile of Binomial(reps, factor * level)."""
    return int(stats.binom.ppf(1.0 - eps, reps, min(1.0, factor * level)))


def pass_probability(reps: int, level: float, liberal: float, factor: float, eps: float = FALSE_FAIL) -> float:
    """P(a test of true size liberal * level passes the check at ``factor``) with ``reps`` replicates."""
    return float(stats.binom.cdf(rejection_limit(reps, level, factor, eps), reps, min(1.0, liberal * level)))


def reps_to_catch(level: float, liberal: float, factor: float, eps: float = FALSE_FAIL, miss: float = MISS) -> int:
    """Smallest R (to 0.5 %) with pass_probability(R, ...) <= miss: the replicates a check needs."""
    if liberal <= factor:
        raise ValueError(f"a check tolerating {factor}x cannot catch a test {liberal}x liberal")
    lo, hi = 1, 16
    while pass_probability(hi, level, liberal, factor, eps) > miss:
        lo, hi = hi, hi * 2
    while hi - lo > max(1, lo // 200):
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if pass_probability(mid, level, liberal, factor, eps) <= miss else (mid, hi)
    while pass_probability(hi, level, liberal, factor, eps) > miss:  # the binomial is discrete: step past any bump
        hi += 1
    return hi
