"""Are rows sampled in the same call independent? An exact test of within-call against across-call agreement.

Every test of a run assumes that an engine's rows are independent draws: a batch whose rows
share random numbers (one uniform for every row of a batch, one seed per request reused for
each of its rows) can give every row the exact target law and still inflate the spread of
every count, so the chi-square tests read the shared randomness as a shift of the token law.

The test (:func:`row_independence`): rows carry a *group* (the call, or the batch, they were
sampled in) and a *stratum* (the prompt they continue: rows of different prompts have
different laws). Within each (group, stratum), rows in their order are taken four at a time:
the first two form a **within pair**, the other two go to the stratum's **across pool**, whose
rows are paired with rows of other groups. No row is in two pairs, so under independence the
pairs are independent and, at every generated position t, each pair's two symbols (token or
END) agree with the same probability q_(stratum, t), whether the pair is within or across.
Given each stratum's number of agreeing pairs, the number of agreeing within pairs is then a
sum of independent hypergeometric counts: a stratified Fisher test, which is exactly the
permutation test of the within/across labels of the pairs (no Monte Carlo, no asymptotics).
One-sided: shared randomness makes rows of one call agree MORE often. The positions are
combined by Bonferroni over every column of ``tokens`` (a count fixed before any data), so the
p-value is exactly valid: P(p <= u) <= u under independence for every u.

The pairing looks only at the groups, the strata and the row order, never at the tokens,
which is what keeps it exact. It uses half the rows for within pairs; dependence between
rows of one group that the pairing never puts side by side (rows of different prompts, rows
far apart in a large call) is not seen.
"""

from __future__ import annotations

import numpy as np

from speceq.stats.bounds import newcombe_interval
from speceq.stats.comparison import _hypergeom_sum_sf
from speceq.stats.counts import position_symbols
from speceq.stats.results import IndependenceResult

#: Rows of one (group, stratum) taken per round: two for a within pair, two for the across pool.
_ROUND = 4


def _independence_iv(tokens: object, lengths: object, groups: object,
                     strata: object) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    tok = np.asarray(tokens)
    if tok.ndim != 2 or not np.issubdtype(tok.dtype, np.integer):
        raise ValueError(f"`tokens` must be a 2-D integer array [rows, positions], got {tok.dtype} {tok.shape}")
    rows = tok.shape[0]

    def per_row(x: object, name: str) -> np.ndarray:
        a = np.asarray(x)
        if a.shape != (rows,) or not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"`{name}` must be a 1-D integer array with one entry per row ({rows}), "
                             f"got {a.dtype} {a.shape}")
        return a.astype(np.int64, copy=False)

    lens = per_row(lengths, "lengths")
    if lens.size and (lens.min() < 0 or lens.max() > tok.shape[1]):
        bad = int(np.flatnonzero((lens < 0) | (lens > tok.shape[1]))[0])
        raise ValueError(f"`lengths[{bad}]` is {int(lens[bad])}, expected 0..{tok.shape[1]}")
    g = per_row(groups, "groups")
    s = np.zeros(rows, dtype=np.int64) if strata is None else per_row(strata, "strata")
    return tok.astype(np.int64, copy=False), lens, g, s


def _by_appearance(values: np.ndarray) -> np.ndarray:
    """The distinct values in order of first appearance (so that relabelling them changes nothing)."""
    labels, first = np.unique(values, return_index=True)
    return labels[np.argsort(first)]


def independence_pairs(groups: np.ndarray, strata: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The disjoint within and across pairs of :func:`row_independence`: two int64 arrays ``[pairs, 2]`` of row indices.

    Chosen from the groups, the strata and the row order only (never the tokens). An across pair
    never joins two rows of one group; pool rows left without a partner of another group are unused,
    and so are the within pairs of a stratum that has no across pair (nothing to compare them with).
    """
    g, s = np.asarray(groups, dtype=np.int64), np.asarray(strata, dtype=np.int64)
    within: list[tuple[int, int]] = []
    across: list[tuple[int, int]] = []
    for stratum in _by_appearance(s):  # in order of appearance: any relabelling pairs the same rows, in one order
        pool: list[int] = []
        mine: list[tuple[int, int]] = []
        rows_s = np.flatnonzero(s == stratum)
        for group in _by_appearance(g[rows_s]):
            rows = rows_s[g[rows_s] == group]
            for lo in range(0, rows.size, _ROUND):
                chunk = rows[lo:lo + _ROUND]
                if chunk.size >= 2:
                    mine.append((int(chunk[0]), int(chunk[1])))
                pool += [int(r) for r in chunk[2:]]
        # the pool is ordered by group (in order of appearance): pair the k-th row with the (k + half)-th,
        # skipping same-group pairs
        half = len(pool) // 2
        others = [(a, b) for a, b in zip(pool[:half], pool[half:2 * half]) if g[a] != g[b]]
        if others:
            within += mine
            across += others
    return (np.asarray(within, dtype=np.int64).reshape(-1, 2), np.asarray(across, dtype=np.int64).reshape(-1, 2))


def row_independence(tokens: np.ndarray, lengths: np.ndarray, groups: np.ndarray, strata: np.ndarray | None = None,
                     *, name: str = "row independence", level: float = 0.95) -> IndependenceResult:
    """Exact one-sided test that rows of one group agree no more often than rows of different groups.

    tokens: int ``[rows, positions]`` generated ids (anything after ``lengths`` is ignored; a
    position past a row's end reads END); lengths: int ``[rows]``; groups: int ``[rows]``, the
    call or batch each row was sampled in; strata: int ``[rows]``, the prompt each row
    continues (None: one prompt). ``level``: of the effect's Newcombe interval. See the module
    docstring for the pairs and the p-value.
    """
    tok, lens, g, s = _independence_iv(tokens, lengths, groups, strata)
    within, across = independence_pairs(g, s)
    positions = tok.shape[1]
    best: tuple[float, float, int, int, int] | None = None  # (p, -effect, position, within agree, across agree)
    if within.size and across.size:
        for t in range(positions):
            sym = position_symbols(tok, lens, t)
            agree_w = sym[within[:, 0]] == sym[within[:, 1]]
            agree_a = sym[across[:, 0]] == sym[across[:, 1]]
            layout = []
            for stratum in _by_appearance(s[within[:, 0]]):
                w, a = s[within[:, 0]] == stratum, s[across[:, 0]] == stratum
                nw, na = int(w.sum()), int(a.sum())
                k = int(agree_w[w].sum()) + int(agree_a[a].sum())
                if k and na:
                    layout.append((nw + na, k, nw))
            kw = int(agree_w.sum())
            p = _hypergeom_sum_sf(layout, kw) if layout else 1.0
            ka = int(agree_a.sum())
            candidate = (p, ka / across.shape[0] - kw / within.shape[0], t, kw, ka)
            if best is None or candidate[:2] < best[:2]:
                best = candidate
    nw_pairs, na_pairs = int(within.shape[0]), int(across.shape[0])
    if best is None:
        return IndependenceResult(name=name, statistic=0, pvalue=1.0, position=None, positions=positions,
                                  within_pairs=nw_pairs, across_pairs=na_pairs, within_agree=0, across_agree=0,
                                  groups=int(np.unique(g).size), rows=int(tok.shape[0]), level=level,
                                  low=None, high=None)
    p_min, _, t, kw, ka = best
    lo, hi = newcombe_interval(kw, nw_pairs, ka, na_pairs, level)
    return IndependenceResult(name=name, statistic=kw, pvalue=float(min(1.0, positions * p_min)), position=t,
                              positions=positions, within_pairs=nw_pairs, across_pairs=na_pairs, within_agree=kw,
                              across_agree=ka, groups=int(np.unique(g).size), rows=int(tok.shape[0]), level=level,
                              low=lo, high=hi)


__all__ = ["independence_pairs", "row_independence"]
