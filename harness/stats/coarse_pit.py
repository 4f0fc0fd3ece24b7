"""Coarsened randomized PIT: exact U(0, 1) under H0 when only the top-K of each law is known.

A server that returns the top-K log-probabilities of each next-token law p_t (plus the emitted
token's) does not give the mass ranked before a token outside the top-K. Coarsen the
vocabulary into K + 1 cells: the top-K tokens in their order (descending p, ties by token id)
and one tail cell holding every other token. With c_t the cell of the emitted x_t,

    u_t = F_t(c_t-) + V_t m_t(c_t),   V_t ~ U(0, 1) independent,

where F_t(c-) is the mass of the cells before c and m_t(c) the mass of c (for a top-K token
its probability, for the tail ``1 - sum of the top-K``). The cells partition [0, 1] in
intervals of length m_t(c) that are hit with probability m_t(c), so u_t is exactly U(0, 1)
given the prefix when x_t ~ p_t (the randomized PIT of the coarsened variable; Brockwell 2007),
and the u_t are i.i.d. U(0, 1) over a sequence. When the top-K covers the whole support the
tail cell is empty and u_t is the full randomized PIT of :mod:`speceq.stats.pit`.

What coarsening loses: a shift *inside* the tail (tokens outside the top-K reordered among
themselves) is invisible; a shift of mass into or out of the tail, or among the top-K, is
seen as with the full PIT.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from speceq.stats._validate import check_rng
from speceq.stats.results import _Result

#: Slack on the top-K mass (float rounding of server log-probabilities) before it is an error.
MASS_SLACK = 1e-6


@dataclass(frozen=True, slots=True, kw_only=True)
class CoarsenedPITCells(_Result):
    """The PIT cell of each emitted token: [low, low + mass] inside [0, 1].

    low: mass of the cells ranked before the token's cell (float64 ``[N]``); mass: the cell's
    mass (the token's probability for a top-K token, the tail mass otherwise); tail_mass: each
    law's tail mass, 1 - (top-K mass); in_tail: the token lies outside the top-K; top_k: how
    many tokens each law's top list holds.
    """

    low: np.ndarray
    mass: np.ndarray
    tail_mass: np.ndarray
    in_tail: np.ndarray
    top_k: int

    @property
    def n(self) -> int:
        return int(self.low.size)

    @property
    def tail_tokens(self) -> int:
        """Emitted tokens that fell in the tail cell."""
        return int(np.count_nonzero(self.in_tail))

    @property
    def mean_tail_mass(self) -> float:
        """Average tail mass (1 - top-K mass) over the laws: how coarse the PIT is (0: exact)."""
        return float(np.mean(self.tail_mass)) if self.n else 0.0

    def summary(self) -> str:
        return (f"coarsened PIT cells: {self.n} tokens, top-{self.top_k} plus one tail cell; "
                f"{self.tail_tokens} tokens in the tail, mean tail mass {self.mean_tail_mass:.3g}")

    def randomize(self, rng: np.random.Generator) -> np.ndarray:
        """u = low + V * mass, V ~ U(0, 1) from ``rng``; float64 ``[N]`` in [0, 1]."""
        rng = check_rng(rng)
        return np.clip(self.low + rng.random(self.n) * self.mass, 0.0, 1.0)


def _coarsened_pit_cells_iv(top_probs: object, token_rank: object) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(top_probs)
    r = np.asarray(token_rank)
    if p.ndim != 2 or not np.issubdtype(p.dtype, np.floating):
        raise TypeError(f"`top_probs` must be a 2-D float array [N, K], got {p.dtype} shape {p.shape}")
    if r.ndim != 1 or not np.issubdtype(r.dtype, np.integer):
        raise TypeError(f"`token_rank` must be a 1-D integer array [N], got {r.dtype} shape {r.shape}")
    if r.size != p.shape[0]:
        raise ValueError(f"`token_rank` has {r.size} entries but `top_probs` has {p.shape[0]} rows")
    if p.shape[1] < 1:
        raise ValueError("`top_probs` needs at least one column (K >= 1)")
    p = p.astype(np.float64, copy=False)
    if not np.all(np.isfinite(p)) or np.any(p < 0):
        raise ValueError("`top_probs` must hold finite probabilities >= 0")
    if np.any(np.diff(p, axis=1) > 0):
        row = int(np.flatnonzero((np.diff(p, axis=1) > 0).any(axis=1))[0])
        raise ValueError(f"`top_probs` row {row} is not sorted in descending order")
    total = p.sum(axis=1)
    if np.any(total > 1.0 + MASS_SLACK):
        row = int(np.flatnonzero(total > 1.0 + MASS_SLACK)[0])
        raise ValueError(f"`top_probs` row {row} sums to {total[row]:.9g} > 1")
    if np.any((r < -1) | (r >= p.shape[1])):
        bad = int(np.flatnonzero((r < -1) | (r >= p.shape[1]))[0])
        raise ValueError(f"`token_rank` {r[bad]} at index {bad} is outside [-1, {p.shape[1]})")
    return p, r.astype(np.int64, copy=False)


def coarsened_pit_cells(top_probs: np.ndarray, token_rank: np.ndarray) -> CoarsenedPITCells:
    """PIT cells of emitted tokens from each law's top-K probabilities.

    ``top_probs`` [N, K]: the K largest probabilities of each law, descending (the processed law
    the token was drawn from, not the raw one). ``token_rank`` [N]: the emitted token's index in
    its row's top list (0-based), or -1 when it is outside the top-K (the tail cell).
    """
    p, r = _coarsened_pit_cells_iv(top_probs, token_rank)
    n, k = p.shape
    top_mass = np.minimum(p.sum(axis=1), 1.0)
    before = np.cumsum(p, axis=1) - p  # mass ranked before each top token
    in_tail = r < 0
    idx = np.where(in_tail, 0, r)
    rows = np.arange(n)
    low = np.where(in_tail, top_mass, before[rows, idx])
    mass = np.where(in_tail, 1.0 - top_mass, p[rows, idx])
    return CoarsenedPITCells(low=np.clip(low, 0.0, 1.0), mass=np.clip(mass, 0.0, 1.0), tail_mass=1.0 - top_mass,
                             in_tail=in_tail, top_k=int(k))


def coarsened_randomized_pit(top_probs: np.ndarray, token_rank: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Coarsened randomized PIT values u [N] (exactly U(0, 1) under H0); see the module docstring."""
    return coarsened_pit_cells(top_probs, token_rank).randomize(rng)
