"""The size of a detected shift: a TV estimate that is not biased upward, with lower and upper bounds.

The plug-in TV 1/2 sum |a_i/n_a - b_i/n_b| is biased upward: every cell's sampling noise adds to
it, so two engines that agree show a plug-in TV of order sqrt(k_eff / n) (4-25 times the true TV
of a bf16 engine at the run sizes of the default job). This module says how large a shift is
without that bias, from the same two count vectors:

- **estimate** (cross-fitted, held out): split each engine's draws in two halves at random (a
  multivariate hypergeometric split of the counts, the same law as a random split of exchangeable
  draws); on halves 1 take the set A = {i: a_i/m_a > b_i/m_b}; on halves 2 measure
  P_a(A) - P_b(A); do the same with the halves swapped and average. Each term is an unbiased
  estimate of P_a(A) - P_b(A) <= TV for a set chosen without the draws that measure it, so the
  estimate's expectation is at most the TV, and 0 when the laws agree (no upward bias). It is
  biased downward when the shift is spread thinly over many tokens (the half-sample's A then
  misses some of them); it is clipped at 0.
- **low**: a lower confidence bound, valid at level 1 - alpha: for each fold, the one-sided
  Clopper-Pearson bounds of P_a(A) (below) and P_b(A) (above) at alpha / 4 each, differenced;
  the larger of the two folds (union bound over the 4 binomial bounds). Never above the estimate.
- **high**: an upper confidence bound, valid at level 1 - alpha: the plug-in plus McDiarmid's
  margin sqrt((1/n_a + 1/n_b) ln(1/alpha) / 2) (:func:`speceq.stats.tv_upper_bound_two_sample`;
  E[plug-in] >= TV). Distribution-free, so it needs of the order of ln(1/alpha) / tolerance^2
  draws per engine to fall below a small tolerance.

Over the L laws of a case (its positions' token laws, and in a run also the joint law of its first
two tokens), :func:`max_tv_size` bounds the largest TV: every law at alpha / L (Bonferroni), so
[max low, max high] covers max_t TV_t with probability at least 1 - alpha. The coverage measured by simulation is in docs/measurements/calibration.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from speceq.stats._validate import as_counts, check_level
from speceq.stats.results import Effect, _Result
from speceq.stats.tv import tv_distance, tv_upper_bound_two_sample

__all__ = ["TVInterval", "draws_to_certify", "max_tv_size", "tv_size"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TVInterval(_Result):
    """The size of a shift in TV: held-out ``estimate`` in [``low``, ``high``] at confidence ``level``.

    plug_in: the plug-in TV (biased upward; for comparison only). positions: how many positions the
    interval holds over at once (1 for one position); position: the index of the position whose
    upper bound is the largest (the one the interval's ``high`` comes from). n_a / n_b: draws per engine
    (the smallest over positions).
    """

    estimate: float
    low: float
    high: float
    plug_in: float
    level: float
    n_a: int
    n_b: int
    positions: int = 1
    position: int = 0

    def effect(self) -> Effect:
        """The interval as the effect of a ``shifted`` verdict (name, unit, estimate, low, high, level)."""
        what = f"largest TV of {self.positions} laws" if self.positions > 1 else "TV"
        return Effect(name=f"{what} (held-out estimate)", unit="TV", estimate=self.estimate, low=self.low,
                      high=self.high, level=self.level)

    def summary(self) -> str:
        return (f"TV {self.estimate:.4f} in [{self.low:.4f}, {self.high:.4f}] (confidence {self.level:.4g}; "
                f"plug-in {self.plug_in:.4f})")


def _split(counts: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A random split of the draws behind ``counts`` into halves (floor and ceil of n / 2)."""
    half = rng.multivariate_hypergeometric(counts, int(counts.sum()) // 2)
    return half, counts - half


def _fold(sel_a: np.ndarray, sel_b: np.ndarray, use_a: np.ndarray, use_b: np.ndarray,
          alpha: float) -> tuple[float, float]:
    """(held-out difference, its lower bound at level 1 - alpha) for the set chosen on ``sel_*``."""
    m_a, m_b = int(use_a.sum()), int(use_b.sum())
    chosen = sel_a * int(sel_b.sum()) > sel_b * int(sel_a.sum())  # a_i / m_a > b_i / m_b, in integers
    k_a, k_b = int(use_a[chosen].sum()), int(use_b[chosen].sum())
    diff = k_a / m_a - k_b / m_b
    low_a = 0.0 if k_a == 0 else float(stats.beta.ppf(alpha / 2, k_a, m_a - k_a + 1))
    high_b = 1.0 if k_b == m_b else float(stats.beta.ppf(1 - alpha / 2, k_b + 1, m_b - k_b))
    return diff, low_a - high_b


def _tv_size_iv(counts_a: object, counts_b: object, alpha: object) -> tuple[np.ndarray, np.ndarray, float]:
    a = as_counts(counts_a, "counts_a")
    b = as_counts(counts_b, "counts_b")
    if a.shape != b.shape:
        raise ValueError(f"`counts_a` and `counts_b` must be aligned, got lengths {a.size} and {b.size}")
    if a.sum() < 2 or b.sum() < 2:
        raise ValueError(f"`counts_a` and `counts_b` must each hold at least 2 draws (to split in halves), got "
                         f"{int(a.sum())} and {int(b.sum())}")
    return a, b, check_level(alpha, "alpha")


def tv_size(counts_a: np.ndarray, counts_b: np.ndarray, *, alpha: float, rng: np.random.Generator) -> TVInterval:
    """The TV between the laws behind two aligned count vectors: held-out estimate, [low, high] at 1 - ``alpha``.

    ``rng`` draws the split of the draws in halves (the estimate and ``low`` depend on it; ``high``
    does not). See the module docstring for what each number is and why it is valid.
    """
    a, b, alpha = _tv_size_iv(counts_a, counts_b, alpha)
    a1, a2 = _split(a, rng)
    b1, b2 = _split(b, rng)
    d1, low1 = _fold(a1, b1, a2, b2, alpha / 2)
    d2, low2 = _fold(a2, b2, a1, b1, alpha / 2)
    estimate = min(1.0, max(0.0, (d1 + d2) / 2))
    plug_in = tv_distance(a, b)
    high = tv_upper_bound_two_sample(plug_in, int(a.sum()), int(b.sum()), alpha)
    low = min(estimate, max(0.0, low1, low2))
    return TVInterval(estimate=estimate, low=low, high=max(high, estimate), plug_in=plug_in, level=1.0 - alpha,
                      n_a=int(a.sum()), n_b=int(b.sum()))


def max_tv_size(counts_a: Sequence[np.ndarray], counts_b: Sequence[np.ndarray], *, alpha: float,
                rng: np.random.Generator) -> TVInterval:
    """The largest TV over aligned pairs of count vectors (e.g. one per position), each pair at ``alpha`` / L.

    low / high: the largest lower and upper bound (together they cover max_t TV_t with probability
    at least 1 - ``alpha``); estimate: the largest held-out estimate; position: the index whose
    upper bound is the largest.
    """
    if len(counts_a) != len(counts_b) or not counts_a:
        raise ValueError(f"`counts_a` and `counts_b` must hold the same positive number of positions, got "
                         f"{len(counts_a)} and {len(counts_b)}")
    level = check_level(alpha, "alpha") / len(counts_a)
    sizes = []
    for t, (a, b) in enumerate(zip(counts_a, counts_b)):
        try:
            sizes.append(tv_size(a, b, alpha=level, rng=rng))
        except ValueError as e:
            raise ValueError(f"position {t}: {e}") from None
    worst = max(range(len(sizes)), key=lambda t: sizes[t].high)
    return TVInterval(estimate=max(s.estimate for s in sizes), low=max(s.low for s in sizes),
                      high=sizes[worst].high, plug_in=max(s.plug_in for s in sizes), level=1.0 - float(alpha),
                      n_a=min(s.n_a for s in sizes), n_b=min(s.n_b for s in sizes), positions=len(sizes),
                      position=worst)


def draws_to_certify(tolerance: float, *, alpha: float, positions: int = 1) -> int:
    """Draws per engine at which ``high`` can fall below ``tolerance`` at all (plug-in 0): the margin alone.

    ``sqrt((2 / n) ln(positions / alpha) / 2) < tolerance``, i.e. n > ln(positions / alpha) / tolerance^2.
    A lower limit: the plug-in's own bias adds to it.
    """
    return math.floor(math.log(positions / alpha) / tolerance**2) + 1
