"""Size of the blocked comparison (speceq.stats.blocked) at the Holm levels, for unequal row counts.

The blocked test puts each candidate row with its share of a larger engine's rows (the numerics
control at ``--control-ratio`` r). Given the blocks' multisets its p-value's law is known exactly
(:func:`speceq.stats.blocked_conditional_size`), so the size at a level is measured without rare-event
simulation: draw the rows under H0 (every row of a block from one law), compute the exact conditional
size, average over draws (Rao-Blackwellised). Row-score laws that stress the grid: normal, integer
counts with many ties, heavy tails (Student t, 1.5 degrees of freedom), a lognormal skew, rare spikes
(a row score of 10 with probability 0.01, like a token the oracle calls impossible). Layouts: one case
(3 000 candidate rows, r x 3 000 control rows), the drift direction (the baseline's 3 000 rows against
the control's r x 3 000: the smaller engine is the baseline), and six cases pooled.

Usage: python benchmarks/blocked_calibration.py [--draws 20] [--ratios 2 3] [--rows 3000] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import numpy as np

from speceq.stats import block_rows_by_prompt, blocked_conditional_size, row_blocks

LEVELS = (1e-3, 1e-4, 2e-5)
LAWS: dict[str, Callable[[np.random.Generator, int], np.ndarray]] = {
    "normal": lambda rng, n: rng.normal(size=n),
    "integer counts (Poisson 0.3)": lambda rng, n: rng.poisson(0.3, size=n).astype(float),
    "heavy tail (t, 1.5 df)": lambda rng, n: rng.standard_t(1.5, size=n),
    "skewed (lognormal, sigma 2)": lambda rng, n: rng.lognormal(0.0, 2.0, size=n),
    "rare spikes (10 w.p. 0.01)": lambda rng, n: 10.0 * (rng.random(n) < 0.01) + 0.01 * rng.normal(size=n),
}


def layout_blocks(rng: np.random.Generator, law: Callable[[np.random.Generator, int], np.ndarray], rows: int,
                  ratio: int, layout: str) -> list:
    """The blocks of one null draw: 'case' (the candidate is the smaller engine), 'drift' (the baseline is), or
    'pooled' (six cases of 'case')."""
    cases = 6 if layout == "pooled" else 1
    out = []
    for _ in range(cases):
        small = np.repeat(np.arange(3), rows // 3)  # three prompts, as a batch with companions
        large = np.repeat(np.arange(3), ratio * rows // 3)
        if layout == "drift":
            bb, bc, n = block_rows_by_prompt(small, large)
            out.append(row_blocks(law(rng, small.size), bb, law(rng, large.size), bc, n))
        else:
            bb, bc, n = block_rows_by_prompt(large, small)
            out.append(row_blocks(law(rng, large.size), bb, law(rng, small.size), bc, n))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=20, help="null draws per cell. Default: %(default)s")
    ap.add_argument("--ratios", type=int, nargs="+", default=[2, 3])
    ap.add_argument("--rows", type=int, default=3000, help="rows of the smaller engine per case")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    print("| law | ratio | layout | " + " | ".join(f"size / level at {a:g}" for a in LEVELS) + " | largest draw / level |")
    print("|---|---|---|" + "---|" * len(LEVELS) + "---|")
    worst = 0.0
    t0 = time.time()
    for name, law in LAWS.items():
        for ratio in args.ratios:
            for layout in ("case", "drift", "pooled"):
                sizes = np.array([blocked_conditional_size(layout_blocks(rng, law, args.rows, ratio, layout), LEVELS)
                                  for _ in range(args.draws)])
                mean = sizes.mean(axis=0) / np.array(LEVELS)
                top = float((sizes / np.array(LEVELS)).max())
                worst = max(worst, float(mean.max()))
                print(f"| {name} | {ratio} | {layout} | " + " | ".join(f"{m:.3f}" for m in mean) + f" | {top:.3f} |",
                      flush=True)
    print(f"\nlargest mean size / level: {worst:.3f} ({args.draws} draws per cell, {time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
