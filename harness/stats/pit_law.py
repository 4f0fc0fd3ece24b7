"""A certificate a real vocabulary can afford: a bound on the law of the oracle PIT, per position.

The per-position TV certificate compares token laws cell by cell: on a 49 152-token vocabulary it
needs thousands of samples per engine. The randomized PIT of each candidate token under the
target's exact law, ``u = F(x-) + V p(x)`` with the tokens ranked by decreasing target probability
(:mod:`speceq.stats.pit`), is exactly U(0, 1) given its prefix when the candidate samples the
target; its law is one-dimensional, so its distance to the uniform law can be bounded with a
few hundred rows whatever the vocabulary size.

What is certified, exactly. For position t, let R_t be the event that a candidate row reaches t
(has a t-th generated token), U_t that token's PIT, and pi_t = P(R_t). The certified quantity is

    D_t = sup over u in [0, 1] of | P(R_t and U_t <= u) - u P(R_t) |  =  pi_t * K_t,

K_t the Kolmogorov distance of the law of U_t given R_t from U(0, 1). In words: for every mass
level u, the probability that the candidate reaches position t and emits one of the target's most
likely tokens covering mass u (at its own prefix; the boundary token counted fractionally) is
within D_t of u times the probability of reaching t. Under the target's own sampling every D_t is 0;
a wrong temperature, a truncation (top-k / top-p) error, mass moved between likely and unlikely
tokens, or a draft's law leaking through, move it.

What is NOT certified: the TV between the token laws (K_t is at most the mean conditional TV
E[TV(q(.|h), p(.|h))] at position t, not a bound on it); differences that keep the rank-mass
profile (mass swapped between tokens of equal target probability; errors of opposite sign at
different prefixes, cancelling in the average); the dependence between positions; and anything
the target oracle itself gets wrong (it is trusted).

The bound. Rows are independent, so given which rows reach t their U_t are i.i.d.: the
Dvoretzky-Kiefer-Wolfowitz inequality with Massart's constant bounds K_t by the sample
Kolmogorov statistic plus sqrt(ln(2 / a) / (2 n_t)), and a one-sided Clopper-Pearson bound gives
pi_t <= pi_t^up; then D_t <= pi_t^up * min(1, K_t^up). With a = alpha / (2 L) for each of the
L DKW and L Clopper-Pearson statements (a union bound), every D_t is bounded at once with
probability >= 1 - alpha, and ``bound`` = max_t of them bounds max_t D_t.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sp_stats

from speceq.stats._validate import check_int, check_level
from speceq.stats.results import _Result


@dataclass(frozen=True, slots=True, kw_only=True)
class PITLawPosition(_Result):
    """One position: ``n`` rows reach it (of ``rows``); ``statistic``: the sample Kolmogorov
    distance of their PITs from U(0, 1) (0 when n = 0); ``reach_upper``: upper bound on the
    probability of reaching it; ``bound``: upper bound on D_t (see the module docstring)."""

    position: int
    n: int
    statistic: float
    reach_upper: float
    bound: float


@dataclass(frozen=True, slots=True, kw_only=True)
class PITLawBound(_Result):
    """Simultaneous (1 - alpha) upper bounds on D_t for t < L; ``bound`` = the largest, at ``worst_position``."""

    bound: float
    worst_position: int
    rows: int
    alpha: float
    positions: tuple[PITLawPosition, ...]

    def summary(self) -> str:
        p = self.positions[self.worst_position]
        return (f"PIT-law bound {self.bound:.3f} (worst at position {p.position}: {p.n} of {self.rows} rows, "
                f"Kolmogorov {p.statistic:.3f}); simultaneous over {len(self.positions)} positions at "
                f"alpha={self.alpha:g}")


def kolmogorov_uniform_statistic(u: np.ndarray) -> float:
    """sup_u |F_n(u) - u| of a sample in [0, 1] (exact: checked at the order statistics)."""
    x = np.sort(np.asarray(u, dtype=np.float64))
    n = x.size
    if n == 0:
        return 0.0
    i = np.arange(1, n + 1, dtype=np.float64)
    return float(max(np.max(i / n - x), np.max(x - (i - 1) / n)))


def _pit_law_bound_iv(u: object, position: object, rows: object, positions: object,
                      alpha: object) -> tuple[np.ndarray, np.ndarray, int, int, float]:
    uu = np.asarray(u, dtype=np.float64)
    pos = np.asarray(position)
    if uu.ndim != 1 or pos.ndim != 1 or uu.shape != pos.shape:
        raise ValueError(f"`u` and `position` must be 1-D and aligned, got shapes {uu.shape} and {pos.shape}")
    if uu.size and (not np.all(np.isfinite(uu)) or uu.min() < 0.0 or uu.max() > 1.0):
        raise ValueError("`u` must hold PIT values in [0, 1]")
    if pos.size and not np.issubdtype(pos.dtype, np.integer):
        raise TypeError(f"`position` must hold integers, got dtype {pos.dtype}")
    n_rows = check_int(rows, "rows", minimum=1)
    L = check_int(positions, "positions", minimum=1)
    if pos.size and (pos.min() < 0 or pos.max() >= L):
        raise ValueError(f"`position` must lie in [0, {L}), found {int(pos.min())}..{int(pos.max())}")
    counts = np.bincount(pos.astype(np.int64), minlength=L) if pos.size else np.zeros(L, dtype=np.int64)
    if counts.max(initial=0) > n_rows:
        t = int(np.argmax(counts))
        raise ValueError(f"position {t} has {int(counts[t])} tokens, more than `rows` = {n_rows}")
    return uu, pos.astype(np.int64), n_rows, L, check_level(alpha, "alpha")


def pit_law_bound(u: np.ndarray, position: np.ndarray, *, rows: int, positions: int, alpha: float) -> PITLawBound:
    """Simultaneous upper bounds on the PIT-law deviations D_t, t < ``positions`` (module docstring).

    ``u``: the randomized PIT of every generated token of ``rows`` independent candidate rows of
    one prompt; ``position``: each token's position (0 = first generated token), at most one token
    per row and position. Rows that end early (EOS) simply have no tokens at later positions.
    """
    uu, pos, n_rows, L, a = _pit_law_bound_iv(u, position, rows, positions, alpha)
    level = a / (2 * L)
    out = []
    for t in range(L):
        sample = uu[pos == t]
        n_t = int(sample.size)
        if n_t == n_rows:
            reach = 1.0
        else:  # one-sided Clopper-Pearson upper bound on P(reach t) from n_t of n_rows
            reach = float(sp_stats.beta.ppf(1.0 - level, n_t + 1, n_rows - n_t))
        k = kolmogorov_uniform_statistic(sample)
        k_up = 1.0 if n_t == 0 else min(1.0, k + math.sqrt(math.log(2.0 / level) / (2.0 * n_t)))
        out.append(PITLawPosition(position=t, n=n_t, statistic=k, reach_upper=reach, bound=min(1.0, reach * k_up)))
    worst = max(range(L), key=lambda t: out[t].bound)
    return PITLawBound(bound=out[worst].bound, worst_position=worst, rows=n_rows, alpha=a, positions=tuple(out))


def required_n_pit_law(tolerance: float, positions: int, alpha: float, probability: float = 0.9) -> int:
    """Rows per engine at which :func:`pit_law_bound` falls below ``tolerance`` with about
    ``probability`` when the candidate samples the target and every row reaches every position
    (the worst case: a position reached by fewer rows has a smaller D_t bound): the smallest n with
    q / sqrt(n) + sqrt(ln(2 / a) / (2 n)) <= tolerance, where a = alpha / (2 positions) and q is the
    ``probability ** (1 / positions)`` quantile of the limiting Kolmogorov law (independent
    positions: all of them under the tolerance at once)."""
    if not 0.0 < float(tolerance) <= 1.0:
        raise ValueError(f"`tolerance` must lie in (0, 1], got {tolerance!r}")
    L = check_int(positions, "positions", minimum=1)
    a = check_level(alpha, "alpha")
    if not 0.0 < float(probability) < 1.0:
        raise ValueError(f"`probability` must lie in (0, 1), got {probability!r}")
    q = float(sp_stats.kstwobign.ppf(float(probability) ** (1.0 / L)))
    root = q + math.sqrt(math.log(2.0 / (a / (2 * L))) / 2.0)
    return int(math.ceil((root / float(tolerance)) ** 2))
