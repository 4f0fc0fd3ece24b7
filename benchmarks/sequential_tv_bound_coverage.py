"""Coverage of the sequential runs' time-uniform TV bound, measured at every look at once.

A sequential run states, at each look, the time-uniform upper bound on the largest per-position TV
of a case's prompt (:func:`speceq.pipeline.sequential.evidence.case_tv_bound`, built on
:func:`speceq.stats.sequential.sequential_tv_upper_bound`), and calls a detected difference
``within-tolerance`` when that bound is below the numerics tolerance. Both rest on the bound
holding at every look simultaneously with probability >= 1 - alpha, argued from a union bound over
the look grid. This script measures it.

For each world (L positions, each a baseline law p_t and a candidate law q_t with a known TV_t),
``--reps`` independent sample paths grow exactly as a sequential run grows its samples: looks at
:func:`speceq.pipeline.sequential.driver.look_totals` of the budget, each look using the data up to
the largest grid point <= n (:func:`speceq.stats.sequential.grid_point_at_most`; the looks are grid
points, so all the data), the bound at level alpha_k / L per position. Measured per world:

- miss: the share of paths in which, at SOME look, SOME position's bound is below its true TV_t
  (the event the union bound says has probability <= alpha);
- within-tolerance false alarm (worlds whose largest TV equals ``tolerance``): the share of paths in
  which, at some look, the case's bound (the largest over positions) is below the tolerance, i.e.
  a case as large as the tolerance that would be called within it if an e-process crossed there
  (the crossing is not simulated: requiring it can only lower the rate);
- the same miss rate for a deliberately too narrow bound, the fixed-n bound at level alpha / L
  applied at every look (no spending over the grid), as a contrast.

Each rate carries its two-sided 95 % Clopper-Pearson interval (:func:`speceq.stats.clopper_pearson`).
Positions are sampled independently of each other (a row's positions are dependent in a real
run; the union bound over positions does not use independence, but the rates here are those of
independent positions). Plug-in TVs are computed from exact multinomial count increments
between looks (small vocabularies) or from the individual draws (large vocabularies); both are
checked against :func:`speceq.stats.tv_distance` on the first paths.

Usage (about 7 minutes on the 2-core CPU machine, shared, `nice`):

    python benchmarks/sequential_tv_bound_coverage.py --json /tmp/seqcov.json
    python benchmarks/sequential_tv_bound_coverage.py --reps 20000 --zipf-reps 2000 --worlds small-0.1
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from speceq.pipeline.sequential.driver import look_totals
from speceq.stats import clopper_pearson, tv_upper_bound_two_sample
from speceq.stats.sequential import grid_point_at_most, sequential_tv_upper_bound

#: Largest vocabulary simulated by count increments (cost ~ reps x vocabulary per look); above it, by draws.
COUNTS_MAX_VOCAB = 1000
#: Draws (both engines) per block of paths in the draw-by-draw simulation (memory ~ 60 bytes each).
EVENTS_PER_BLOCK = 4_000_000


def zipf(k: int, s: float) -> np.ndarray:
    """Zipf(s) law over k tokens."""
    p = 1.0 / np.arange(1, k + 1, dtype=np.float64) ** s
    return p / p.sum()


def at_tv(p: np.ndarray, tv: float, toward: str = "last") -> np.ndarray:
    """q = (1 - lam) p + lam r with TV(p, q) = lam TV(p, r) = ``tv`` exactly; r: the point mass on the
    least likely token (``toward="last"``) or the uniform law (``"uniform"``, mass spread over every token)."""
    if toward == "last":
        r = np.zeros(p.size)
        r[-1] = 1.0
    elif toward == "uniform":
        r = np.full(p.size, 1.0 / p.size)
    else:
        raise ValueError(f"`toward` must be 'last' or 'uniform', got {toward!r}")
    full = 0.5 * float(np.abs(p - r).sum())
    if tv > full:
        raise ValueError(f"TV {tv} exceeds TV(p, r) = {full:.4f}: not reachable by this mixture")
    if tv == 0:
        return p.copy()
    lam = tv / full
    return (1.0 - lam) * p + lam * r


@dataclass(frozen=True)
class World:
    """L positions, each a (baseline law, candidate law, true TV); the run's budget; its tolerance, if any."""

    name: str
    laws: tuple[tuple[np.ndarray, np.ndarray, float], ...]
    budget: int
    tolerance: float | None = None


def world(name: str, base: Sequence[np.ndarray], tvs: Sequence[float], budget: int,
          tolerance: float | None = None, toward: str = "last") -> World:
    """A world whose candidate law at position t is ``at_tv(base[t], tvs[t], toward)``."""
    laws = []
    for p, tv in zip(base, tvs):
        q = at_tv(p, tv, toward)
        laws.append((p, q, 0.5 * float(np.abs(p - q).sum())))
    return World(name=name, laws=tuple(laws), budget=budget, tolerance=tolerance)


def default_worlds() -> list[World]:
    """The measured worlds (names are stable: ``--worlds`` selects by name)."""
    small = [zipf(10, 1.0), zipf(10, 0.5), zipf(10, 1.5), zipf(10, 1.2)]
    coin = [np.array([0.5, 0.5])] * 4  # McDiarmid is tight in its exponent here: the least favourable law
    big = [zipf(49_152, 1.1), zipf(49_152, 1.0)]
    return [
        world("small-0", small, [0, 0, 0, 0], 3000),
        world("small-0.3", small, [0.3] * 4, 3000, tolerance=0.3),
        world("small-0.1", small, [0.1] * 4, 24_000, tolerance=0.1),
        world("small-0.05", small, [0.05] * 4, 96_000, tolerance=0.05),
        world("small-mixed", small, [0, 0.05, 0.1, 0.3], 96_000),
        world("small-0.01-one", small, [0.01, 0, 0, 0], 400_000, tolerance=0.01),
        world("coin-0.1", coin[:1], [0.1], 96_000, tolerance=0.1),
        world("coin4-0.01", coin, [0.01] * 4, 400_000, tolerance=0.01),
        world("zipf49k-0.1", big, [0.1, 0.1], 6_000, tolerance=0.1, toward="uniform"),
    ]


def plugin_tv_counts(p: np.ndarray, q: np.ndarray, grid: Sequence[int], reps: int,
                      rng: np.random.Generator) -> np.ndarray:
    """reps x len(grid) plug-in TVs at the grid points, from exact multinomial count increments."""
    ca = np.zeros((reps, p.size), dtype=np.int64)
    cb = np.zeros((reps, q.size), dtype=np.int64)
    out = np.empty((reps, len(grid)))
    prev = 0
    for j, g in enumerate(grid):
        ca += rng.multinomial(g - prev, p, size=reps)
        cb += rng.multinomial(g - prev, q, size=reps)
        out[:, j] = 0.5 * np.abs(ca - cb).sum(axis=1) / g
        prev = g
    return out


def plugin_tv_draws(p: np.ndarray, q: np.ndarray, grid: Sequence[int], reps: int,
                     rng: np.random.Generator) -> np.ndarray:
    """reps x len(grid) plug-in TVs, from the individual draws (cost ~ draws, not vocabulary).

    With equal sample counts n, TV = S_n / (2 n), S_n = sum_x |c_a(x) - c_b(x)|; each draw moves one
    |c_a(x) - c_b(x)| by +-1, found by sorting the draws of a path by token (stable, so in time order).
    """
    n = int(grid[-1])
    cdf_p, cdf_q = np.cumsum(p), np.cumsum(q)
    v = p.size
    block = max(1, EVENTS_PER_BLOCK // (2 * n))
    idx = np.asarray(grid, dtype=np.int64) - 1
    out = np.empty((reps, len(grid)))
    sign = np.tile(np.array([1, -1], dtype=np.int64), n)
    for start in range(0, reps, block):
        c = min(block, reps - start)
        tok = np.empty((c, 2 * n), dtype=np.int64)
        tok[:, 0::2] = np.minimum(np.searchsorted(cdf_p, rng.random((c, n)), side="right"), v - 1)
        tok[:, 1::2] = np.minimum(np.searchsorted(cdf_q, rng.random((c, n)), side="right"), v - 1)
        key = (tok + np.arange(c, dtype=np.int64)[:, None] * v).ravel()
        del tok
        order = np.argsort(key, kind="stable")
        sk = key[order]
        ss = np.broadcast_to(sign, (c, 2 * n)).ravel()[order]
        del key
        cs = np.cumsum(ss)
        first = np.flatnonzero(np.concatenate([[True], sk[1:] != sk[:-1]]))
        size = np.diff(np.concatenate([first, [sk.size]]))
        before_group = np.repeat(cs[first] - ss[first], size)
        after = cs - before_group
        delta = np.empty(sk.size, dtype=np.int64)
        delta[order] = np.abs(after) - np.abs(after - ss)
        steps = delta.reshape(c, n, 2).sum(axis=2)
        s = np.cumsum(steps, axis=1)[:, idx]
        out[start:start + c] = s / (2.0 * np.asarray(grid, dtype=np.float64))
    return out


def plugin_tv_paths(p: np.ndarray, q: np.ndarray, grid: Sequence[int], reps: int,
                    rng: np.random.Generator) -> np.ndarray:
    """reps x len(grid) plug-in TVs between n draws of p and n of q at each grid point n (one growing path per row)."""
    if p.size <= COUNTS_MAX_VOCAB:
        return plugin_tv_counts(p, q, grid, reps, rng)
    return plugin_tv_draws(p, q, grid, reps, rng)


def margins(looks: Sequence[int], alpha: float, positions: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Per look: the time-uniform margin (the project's bound at plug-in TV 0), the fixed-n margin at
    alpha / positions (the too narrow contrast), and the grid point whose data the bound uses."""
    uniform, fixed, used = [], [], []
    for n in looks:
        k, g = grid_point_at_most(n)
        uniform.append(sequential_tv_upper_bound(0.0, n, k, g, alpha, positions=positions).upper)
        fixed.append(tv_upper_bound_two_sample(0.0, g, g, alpha / positions))
        used.append(g)
    return np.array(uniform), np.array(fixed), used


def measure(w: World, reps: int, alpha: float, rng: np.random.Generator, check: int = 3) -> dict[str, Any]:
    """The miss and within-tolerance rates of one world over ``reps`` paths (see the module docstring)."""
    looks = look_totals(w.budget)
    L = len(w.laws)
    m_uniform, m_fixed, used = margins(looks, alpha, L)
    miss = np.zeros(reps, dtype=bool)
    miss_fixed = np.zeros(reps, dtype=bool)
    case_upper = np.zeros((reps, len(looks)))
    first_miss_look: list[int] = []
    for p, q, tv in w.laws:
        plug = plugin_tv_paths(p, q, used, reps, rng)
        upper = np.minimum(1.0, plug + m_uniform)
        for r in range(min(check, reps)):  # the vectorised bound is the project's bound
            for j in (0, len(looks) // 2, len(looks) - 1):
                k, g = grid_point_at_most(looks[j])
                want = sequential_tv_upper_bound(float(plug[r, j]), looks[j], k, g, alpha, positions=L).upper
                if abs(want - upper[r, j]) > 1e-12:
                    raise AssertionError(f"{w.name}: vectorised bound {upper[r, j]} != {want} at n = {looks[j]}")
        below = upper < tv
        miss |= below.any(axis=1)
        first_miss_look += [looks[int(np.argmax(b))] for b in below if b.any()]
        miss_fixed |= (np.minimum(1.0, plug + m_fixed) < tv).any(axis=1)
        case_upper = np.maximum(case_upper, upper)
    out: dict[str, Any] = {
        "world": w.name, "vocab": [int(p.size) for p, _, _ in w.laws], "tvs": [round(tv, 6) for _, _, tv in w.laws],
        "budget": w.budget, "looks": len(looks), "max_n": int(looks[-1]), "alpha": alpha, "reps": reps,
        "miss": _rate(int(miss.sum()), reps), "miss_fixed_n": _rate(int(miss_fixed.sum()), reps),
        "first_miss_looks": sorted(set(first_miss_look))[:10],
        "final_case_upper_mean": float(case_upper[:, -1].mean()),
    }
    if w.tolerance is not None:
        out["tolerance"] = w.tolerance
        out["within_tolerance"] = _rate(int((case_upper < w.tolerance).any(axis=1).sum()), reps)
    return out


def _rate(k: int, n: int) -> dict[str, Any]:
    ci = clopper_pearson(k, n, 0.05)
    return {"count": k, "rate": k / n, "ci95": [ci.low, ci.high]}


def _fmt(r: dict[str, Any]) -> str:
    return f"{r['count']} ({r['rate']:.2g}) [{r['ci95'][0]:.2g}, {r['ci95'][1]:.2g}]"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=100_000, help="paths per small-vocabulary world")
    ap.add_argument("--zipf-reps", type=int, default=10_000, help="paths per 49k-token world")
    ap.add_argument("--alpha", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=20261207)
    ap.add_argument("--worlds", nargs="*", default=None, help="world names (default: all)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    rows = []
    for w in default_worlds():
        if args.worlds and w.name not in args.worlds:
            continue
        t0 = time.perf_counter()
        reps = args.zipf_reps if max(p.size for p, _, _ in w.laws) > COUNTS_MAX_VOCAB else args.reps
        row = measure(w, reps, args.alpha, rng)
        row["seconds"] = round(time.perf_counter() - t0, 1)
        rows.append(row)
        wt = _fmt(row["within_tolerance"]) if "within_tolerance" in row else "-"
        print(f"{row['world']:16s} tvs={row['tvs']} max_n={row['max_n']} looks={row['looks']} reps={reps}: "
              f"miss {_fmt(row['miss'])}; within-tolerance {wt}; fixed-n miss {_fmt(row['miss_fixed_n'])}; "
              f"first misses at n {row['first_miss_looks']} ({row['seconds']} s)", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"alpha": args.alpha, "seed": args.seed, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["World", "at_tv", "default_worlds", "margins", "measure", "plugin_tv_counts", "plugin_tv_draws", "plugin_tv_paths",
           "world", "zipf"]
