"""A proportion with an exact confidence interval: how often an event happened in independent trials.

:func:`clopper_pearson` turns ``successes`` of ``trials`` into the estimate successes / trials and
the two-sided Clopper-Pearson interval at level 1 - alpha (alpha / 2 in each tail): the exact
binomial interval, whose coverage is at least 1 - alpha for every true rate (conservative, never
below). A greedy case uses it for the share of row pairs that diverge beyond a numerical near-tie
(:mod:`speceq.pipeline.greedy`), the size of a greedy ``shifted``.
"""

from __future__ import annotations

from dataclasses import dataclass

from scipy import stats

from speceq.stats._validate import check_int, check_level
from speceq.stats.results import _Result

__all__ = ["ProportionInterval", "clopper_pearson"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProportionInterval(_Result):
    """``successes`` of ``trials``: ``estimate`` = successes / trials in [``low``, ``high``] at confidence ``level``
    (two-sided Clopper-Pearson; low is 0 when successes is 0, high is 1 when successes equals trials)."""

    successes: int
    trials: int
    estimate: float
    low: float
    high: float
    level: float

    def summary(self) -> str:
        return (f"{self.successes} of {self.trials} ({self.estimate:.4f}) in [{self.low:.4f}, {self.high:.4f}] "
                f"(confidence {self.level:.4g}, Clopper-Pearson)")


def _clopper_pearson_iv(successes: object, trials: object, alpha: object) -> tuple[int, int, float]:
    n = check_int(trials, "trials", minimum=1)
    k = check_int(successes, "successes", minimum=0)
    if k > n:
        raise ValueError(f"`successes` ({k}) exceeds `trials` ({n})")
    return k, n, check_level(alpha, "alpha")


def clopper_pearson(successes: int, trials: int, alpha: float) -> ProportionInterval:
    """The share ``successes / trials`` with its two-sided (1 - alpha) Clopper-Pearson interval.

    Exact (coverage >= 1 - alpha) for independent trials of one rate. Independent trials of different
    rates (row pairs of several prompts) are read as trials of their mean rate: their sum is less spread
    than the binomial of that mean (Hoeffding 1956), and the coverage of that mean measured exactly in
    tests/stats/test_proportion.py stays >= 1 - alpha.
    """
    k, n, a = _clopper_pearson_iv(successes, trials, alpha)
    low = 0.0 if k == 0 else float(stats.beta.ppf(a / 2.0, k, n - k + 1))
    high = 1.0 if k == n else float(stats.beta.ppf(1.0 - a / 2.0, k + 1, n - k))
    return ProportionInterval(successes=k, trials=n, estimate=k / n, low=low, high=high, level=1.0 - a)
