"""Row-score comparisons of engines with unequal row counts: one row of the smaller engine per block.

Why. The paired sign-flip test (:mod:`speceq.stats.comparison`) pairs the k-th rows of a prompt and
leaves the rows beyond the smaller engine's count unused. When one engine has r times the other's
rows (a numerics control sampled r times, :mod:`speceq.pipeline.control_arm`), those rows carry
information: the comparison's noise is the candidate's variance plus the other side's *mean*.

The blocks. Within each prompt, the smaller engine's k-th row (collection order) forms block k with
the larger engine's rows i for which floor(i s / L) = k (s, L: the two engines' row counts there):
every row of both engines is in exactly one block, each block holds exactly one row of the smaller
engine, and the layout depends on the row counts only, fixed before any score is seen. Equal counts
give the pairs of :func:`speceq.stats.comparison.pair_rows_by_prompt`'s order.

The test. Under H0 the rows of a block are i.i.d. draws of one law, so given the block's multiset of
scores the position of the smaller engine's row in it is uniform and independent across blocks.
The statistic is T = sum over blocks of (sum of the candidate's centred scores in the block), centred
by the block mean; its conditional law is the sum of independent uniform picks (one per block)
from the block's centred values (signs flipped where the smaller engine is the baseline). With the
values put on an integer grid (unit delta = sum of the block ranges / min(2^16, 64 x blocks), a
function of the multisets only, so the picks stay uniform given it), the exact law of the grid
statistic is a convolution of small uniform laws, computed by a tree of convolutions. Two-sided
p = min(1, 2 min(P(S' >= s), P(S' <= s))): valid at every level and every block size. Blocks of two
are the sign-flip test's pairs (each block's centred values are +-D / 2).

Power: with r rows of the larger engine per block the statistic's noise is sigma^2 (1 + 1 / r) per
block against 2 sigma^2 for pairs, so the same shift needs 2r / (r + 1) times fewer blocks (1.33 at
r = 2, 1.5 at r = 3, at most 2).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import signal

from speceq.stats._validate import as_real_sample
from speceq.stats.results import ComparisonResult, PooledComparisonResult

#: Grid units of the block values: min(GRID_UNITS, UNITS_PER_BLOCK x informative blocks) over the summed ranges.
GRID_UNITS = 1 << 16
UNITS_PER_BLOCK = 64
#: Absolute accuracy of the convolved law; tails are never reported below it.
CONVOLUTION_FLOOR = 1e-12
#: Laws shorter than this are convolved directly, longer ones by FFT.
_DIRECT_MAX = 64
_ALTERNATIVES = ("two-sided", "greater", "less")


@dataclass(frozen=True, slots=True)
class RowBlocks:
    """One row score of one case, laid out in blocks: what :func:`blocked_comparison` tests and pools.

    values: float64 ``[rows]``, each row's score; block: int64 ``[rows]``, its block (0 .. n_blocks - 1);
    candidate: bool ``[rows]``, whether it is the candidate's row. Each block holds one row of one
    engine and at least one of the other.
    """

    values: np.ndarray
    block: np.ndarray
    candidate: np.ndarray
    n_blocks: int


def block_rows_by_prompt(baseline_prompt: np.ndarray,
                         candidate_prompt: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(baseline block, candidate block, number of blocks): each row's block, -1 for a row of a prompt the other
    engine has no row of (module docstring; blocks in order of prompt, then of the smaller engine's rows)."""
    pb, pc = np.asarray(baseline_prompt), np.asarray(candidate_prompt)
    if pb.ndim != 1 or pc.ndim != 1 or not (np.issubdtype(pb.dtype, np.integer) and np.issubdtype(pc.dtype, np.integer)):
        raise ValueError("`baseline_prompt` and `candidate_prompt` must be 1-D integer arrays (prompt index per row)")
    bb, bc = np.full(pb.size, -1, dtype=np.int64), np.full(pc.size, -1, dtype=np.int64)
    start = 0
    for j in np.union1d(np.unique(pb), np.unique(pc)):
        rb, rc = np.flatnonzero(pb == j), np.flatnonzero(pc == j)
        s = min(rb.size, rc.size)
        if s == 0:
            continue
        for rows, out in ((rb, bb), (rc, bc)):
            out[rows] = start + (np.arange(rows.size) * s) // rows.size
        start += s
    return bb, bc, start


def row_blocks(baseline: np.ndarray, baseline_block: np.ndarray, candidate: np.ndarray,
               candidate_block: np.ndarray, n_blocks: int) -> RowBlocks:
    """The :class:`RowBlocks` of one row score: each engine's per-row scores and blocks (rows of block -1 left out)."""
    b = as_real_sample(baseline, "baseline", min_size=0)
    c = as_real_sample(candidate, "candidate", min_size=0)
    bb, bc = np.asarray(baseline_block, dtype=np.int64), np.asarray(candidate_block, dtype=np.int64)
    if bb.shape != b.shape or bc.shape != c.shape:
        raise ValueError("each engine needs one block index per row")
    keep_b, keep_c = bb >= 0, bc >= 0
    return RowBlocks(values=np.concatenate([b[keep_b], c[keep_c]]), block=np.concatenate([bb[keep_b], bc[keep_c]]),
                     candidate=np.concatenate([np.zeros(int(keep_b.sum()), bool), np.ones(int(keep_c.sum()), bool)]),
                     n_blocks=int(n_blocks))


@dataclass(frozen=True, slots=True)
class _Centred:
    """Per block: its rows' centred values as the statistic sees them (the minority engine's possible terms)."""

    terms: list[np.ndarray]   # per informative block: the values one uniform pick takes
    observed: float           # T: sum over blocks of the candidate's centred values
    variance: float           # sum over blocks of the pick's variance
    differences: np.ndarray   # per block: candidate mean - baseline mean
    n_blocks: int
    n_informative: int


def _centre(blocks: RowBlocks) -> _Centred:
    v, blk, cand = blocks.values, blocks.block, blocks.candidate
    order = np.argsort(blk, kind="stable")
    v, blk, cand = v[order], blk[order], cand[order]
    starts = np.flatnonzero(np.r_[True, blk[1:] != blk[:-1]]) if blk.size else np.zeros(0, dtype=np.int64)
    ends = np.r_[starts[1:], blk.size].astype(np.int64)
    terms, observed, variance, diffs = [], 0.0, 0.0, []
    for s, e in zip(starts, ends):
        x, is_c = v[s:e], cand[s:e]
        n_c = int(is_c.sum())
        if n_c == 0 or n_c == x.size:
            raise ValueError(f"block {int(blk[s])} holds rows of one engine only")
        if n_c != 1 and n_c != x.size - 1:
            raise ValueError(f"block {int(blk[s])} holds {n_c} candidate rows of {x.size}: one engine must have one row")
        centred = x - x.mean()
        diffs.append(float(x[is_c].mean() - x[~is_c].mean()))
        observed += float(centred[is_c].sum())
        if not np.any(centred):
            continue
        pick = centred if n_c == 1 else -centred  # the candidate's sum is minus the one baseline row's value
        terms.append(pick)
        variance += float(np.mean(pick * pick))
    return _Centred(terms=terms, observed=observed, variance=variance, differences=np.asarray(diffs),
                    n_blocks=len(diffs), n_informative=len(terms))


def _convolve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if min(a.size, b.size) <= _DIRECT_MAX:
        return np.convolve(a, b)
    return np.clip(signal.fftconvolve(a, b), 0.0, None)


def _grid_law(terms: list[np.ndarray], observed_index: np.ndarray | None = None) -> tuple[np.ndarray, int, float]:
    """(pmf, offset, delta): the exact law of the grid statistic, P(S' = offset + i) = pmf[i], and the grid unit."""
    ranges = np.array([float(t.max() - t.min()) for t in terms])
    delta = float(ranges.sum()) / min(GRID_UNITS, UNITS_PER_BLOCK * len(terms))
    laws, offset = [], 0
    for t in terms:
        g = np.round(t / delta).astype(np.int64)
        lo = int(g.min())
        offset += lo
        laws.append(np.bincount(g - lo) / g.size)
    while len(laws) > 1:
        nxt = [_convolve(laws[i], laws[i + 1]) for i in range(0, len(laws) - 1, 2)]
        if len(laws) % 2:
            nxt.append(laws[-1])
        laws = nxt
    return laws[0], offset, delta


def _grid_observed(blocks: RowBlocks, delta: float) -> int:
    """The grid statistic of the observed layout: the candidate's rounded centred terms summed block by block."""
    v, blk, cand = blocks.values, blocks.block, blocks.candidate
    order = np.argsort(blk, kind="stable")
    v, blk, cand = v[order], blk[order], cand[order]
    starts = np.flatnonzero(np.r_[True, blk[1:] != blk[:-1]]) if blk.size else np.zeros(0, dtype=np.int64)
    ends = np.r_[starts[1:], blk.size].astype(np.int64)
    total = 0
    for s, e in zip(starts, ends):
        x, is_c = v[s:e], cand[s:e]
        centred = x - x.mean()
        if not np.any(centred):
            continue
        if int(is_c.sum()) == 1:
            total += int(np.round(centred[is_c][0] / delta))
        else:
            total += int(np.round(-centred[~is_c][0] / delta))
    return total


def _pvalue(parts: Sequence[RowBlocks], centred: Sequence[_Centred], alternative: str) -> tuple[float, str]:
    terms = [t for c in centred for t in c.terms]
    if not terms:
        return 1.0, "degenerate"
    pmf, offset, delta = _grid_law(terms)
    s = sum(_grid_observed(p, delta) for p in parts) - offset
    upper = float(pmf[s:].sum()) if s < pmf.size else 0.0
    lower = float(pmf[: s + 1].sum()) if s >= 0 else 0.0
    upper, lower = (min(1.0, max(x, CONVOLUTION_FLOOR)) for x in (upper, lower))
    p = {"two-sided": min(1.0, 2.0 * min(upper, lower)), "greater": upper, "less": lower}[alternative]
    return p, "exact blocked permutation (scores on a grid)"


def blocked_conditional_size(blocks: RowBlocks | Sequence[RowBlocks], levels: Sequence[float],
                             alternative: str = "two-sided") -> np.ndarray:
    """P(the blocked test's p <= level) over uniform placements in the given blocks: one value per level.

    Exact (the grid law itself), so a calibration can average it over draws of the blocks' multisets
    (a Rao-Blackwellised size, no rare-event simulation at 2e-5). A sequence: the pooled test's size.
    """
    if alternative not in _ALTERNATIVES:
        raise ValueError(f"`alternative` must be one of {_ALTERNATIVES}, got {alternative!r}")
    parts = [blocks] if isinstance(blocks, RowBlocks) else list(blocks)
    terms = [t for p in parts for t in _centre(p).terms]
    if not terms:
        return np.zeros(len(levels))
    pmf, _, _ = _grid_law(terms)
    upper = np.clip(np.cumsum(pmf[::-1])[::-1], CONVOLUTION_FLOOR, 1.0)  # P(S' >= s)
    lower = np.clip(np.cumsum(pmf), CONVOLUTION_FLOOR, 1.0)  # P(S' <= s)
    p = {"two-sided": np.minimum(1.0, 2.0 * np.minimum(upper, lower)), "greater": upper, "less": lower}[alternative]
    return np.array([float(pmf[p <= a].sum()) for a in levels])


def _check(name: object, alternative: object) -> None:
    if not isinstance(name, str) or not name:
        raise TypeError(f"`name` must be a non-empty string, got {name!r}")
    if alternative not in _ALTERNATIVES:
        raise ValueError(f"`alternative` must be one of {_ALTERNATIVES}, got {alternative!r}")


def blocked_comparison(blocks: RowBlocks, *, name: str, alternative: str = "two-sided") -> ComparisonResult:
    """Exact blocked permutation test of one row score (module docstring): is the candidate's score shifted?

    Z = T / sqrt(the picks' summed variance); mean_difference: the mean over blocks of (candidate
    mean - baseline mean) in the block, rms_difference its root mean square, n_pairs the blocks.
    """
    _check(name, alternative)
    c = _centre(blocks)
    p, method = _pvalue([blocks], [c], alternative)
    n = c.n_blocks
    v, cand = blocks.values, blocks.candidate
    return ComparisonResult(
        name=name, statistic=c.observed / math.sqrt(c.variance) if c.variance > 0 else 0.0, pvalue=float(p),
        n_pairs=n, n_informative=c.n_informative, mean_difference=float(c.differences.mean()) if n else 0.0,
        rms_difference=float(np.sqrt(np.mean(c.differences ** 2))) if n else 0.0,
        baseline_mean=float(v[~cand].mean()) if (~cand).any() else 0.0,
        candidate_mean=float(v[cand].mean()) if cand.any() else 0.0, method=method, alternative=alternative)


def pooled_blocked_comparison(parts: Sequence[RowBlocks], *, name: str,
                              alternative: str = "two-sided") -> PooledComparisonResult:
    """One row score's blocks of several cases tested together (every block weighing the same): is any case shifted?

    Exact under the intersection null (no case shifted): the blocks of all cases are independent.
    case_statistics: each case's own Z.
    """
    _check(name, alternative)
    if isinstance(parts, RowBlocks) or not isinstance(parts, Sequence):
        raise TypeError(f"`parts` must be a sequence of RowBlocks (one per case), got {type(parts).__name__} ({name})")
    centred = [_centre(p) for p in parts]
    zs = tuple(c.observed / math.sqrt(c.variance) if c.variance > 0 else 0.0 for c in centred)
    n_blocks = sum(c.n_blocks for c in centred)
    informative = [c for c in centred if c.n_informative]
    if not informative:
        return PooledComparisonResult(name=name, statistic=0.0, pvalue=1.0, n_cases=0, n_pairs=n_blocks,
                                      case_statistics=zs, method="degenerate", alternative=alternative)
    p, method = _pvalue(parts, centred, alternative)
    variance = sum(c.variance for c in centred)
    return PooledComparisonResult(name=name, statistic=sum(c.observed for c in centred) / math.sqrt(variance),
                                  pvalue=float(p), n_cases=len(informative), n_pairs=n_blocks, case_statistics=zs,
                                  method=f"pooled {method}", alternative=alternative)


def pair_blocks(differences: np.ndarray) -> RowBlocks:
    """Pair differences D (candidate - baseline) as blocks of two (baseline 0, candidate D): the same sign-flip law."""
    d = as_real_sample(differences, "differences", min_size=0)
    n = d.size
    return RowBlocks(values=np.concatenate([np.zeros(n), d]), block=np.tile(np.arange(n, dtype=np.int64), 2),
                     candidate=np.r_[np.zeros(n, bool), np.ones(n, bool)], n_blocks=n)


__all__ = ["CONVOLUTION_FLOOR", "GRID_UNITS", "UNITS_PER_BLOCK", "RowBlocks", "block_rows_by_prompt",
           "blocked_comparison", "blocked_conditional_size", "pair_blocks", "pooled_blocked_comparison", "row_blocks"]
