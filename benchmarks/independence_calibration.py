"""False-alarm rate of the row-independence test (speceq.stats.row_independence) at the Holm levels.

Under independence every row of a prompt is an i.i.d. draw of one law. For each design (calls x rows
per call, positions, law) R null data sets are simulated, vectorised: the pairs the test forms depend
only on the groups, so they are built once (speceq.stats.independence_pairs), each replicate's
agreements are counted and the one-stratum p-value (hypergeometric tail per position, Bonferroni over
positions) is computed in numpy; the first replicates are checked against row_independence itself.
Printed: the measured size P(p <= level) at 1e-3, 1e-4 and 2e-5 with the one-sided 3-sigma band.

    python benchmarks/independence_calibration.py --reps 100000
    python benchmarks/independence_calibration.py --reps 1000000 --designs 0
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy import stats as sps

from speceq.stats import independence_pairs, row_independence

LEVELS = (1e-3, 1e-4, 2e-5)
#: (name, calls, rows per call, positions, law)
DESIGNS = (
    ("peaked law, 8 calls x 16 rows, 4 positions", 8, 16, 4, (0.9, 0.05, 0.05)),
    ("flat law (8 tokens), 8 calls x 16 rows, 4 positions", 8, 16, 4, (0.125,) * 8),
    ("Zipf-like law (50 tokens), 10 calls x 64 rows, 4 positions", 10, 64, 4,
     tuple(np.arange(1, 51) ** -1.1 / (np.arange(1, 51) ** -1.1).sum())),
)
_CHECKED = 200
_CHUNK_CELLS = 20_000_000


def pvalues(symbols: np.ndarray, within: np.ndarray, across: np.ndarray) -> np.ndarray:
    """One-stratum p-values of row_independence for ``symbols`` [reps, rows, positions]."""
    agree_w = (symbols[:, within[:, 0]] == symbols[:, within[:, 1]]).sum(axis=1)  # [reps, positions]
    agree_a = (symbols[:, across[:, 0]] == symbols[:, across[:, 1]]).sum(axis=1)
    nw, na = within.shape[0], across.shape[0]
    p = sps.hypergeom.sf(agree_w - 1, nw + na, agree_w + agree_a, nw)
    p = np.where(agree_w + agree_a == 0, 1.0, p)
    return np.minimum(1.0, symbols.shape[2] * p.min(axis=1))


def run_design(rng: np.random.Generator, calls: int, per_call: int, positions: int, law: tuple[float, ...],
               reps: int) -> np.ndarray:
    rows = calls * per_call
    groups = np.repeat(np.arange(calls), per_call)
    within, across = independence_pairs(groups, np.zeros(rows, dtype=np.int64))
    cdf = np.cumsum(law)
    out = []
    chunk = max(1, _CHUNK_CELLS // (rows * positions))
    done = 0
    while done < reps:
        size = min(chunk, reps - done)
        symbols = np.minimum(np.searchsorted(cdf, rng.random((size, rows, positions)), side="right"), len(law) - 1)
        p = pvalues(symbols, within, across)
        if done == 0:  # the vectorised p-values are the function's
            for i in range(min(_CHECKED, size)):
                ref = row_independence(symbols[i], np.full(rows, positions), groups).pvalue
                assert abs(ref - p[i]) <= 1e-9 * max(1.0, ref), (ref, p[i])
        out.append(p)
        done += size
    return np.concatenate(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=20261207)
    parser.add_argument("--designs", type=int, nargs="+", default=list(range(len(DESIGNS))),
                        help="which designs to run (indices into DESIGNS)")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"R = {args.reps} null data sets per design; size = P(p <= level); band = level + 3 sqrt(level (1 - level) / R)")
    print("| design | " + " | ".join(f"size at {lv:g} (band)" for lv in LEVELS) + " | seconds |")
    print("|---|" + "---|" * (len(LEVELS) + 1))
    for name, calls, per_call, positions, law in (DESIGNS[i] for i in args.designs):
        start = time.perf_counter()
        p = run_design(rng, calls, per_call, positions, law, args.reps)
        cells = []
        for lv in LEVELS:
            band = lv + 3 * np.sqrt(lv * (1 - lv) / args.reps)
            size = float((p <= lv).mean())
            cells.append(f"{size:.2e} ({band:.2e}){'' if size <= band else ' OVER'}")
        print(f"| {name} | " + " | ".join(cells) + f" | {time.perf_counter() - start:.0f} |")


if __name__ == "__main__":
    main()
