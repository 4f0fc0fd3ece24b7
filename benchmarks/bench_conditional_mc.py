"""Time the exact conditional Monte Carlo of the two-sample chi-square: numpy's two table samplers.

``speceq.stats.montecarlo.conditional_tables`` draws null 2 x K tables with both margins fixed
and picks numpy's "count" sampler (cost ~ items of the smaller group) or its "marginals"
sampler (cost ~ K labels), whichever is cheaper. This script times one Monte Carlo p-value
(``chisquare_homogeneity(mc_level=..., mc_stop_after=None)``: all 20 / level tables;
the sparse table takes the Monte Carlo fallback of method "auto", the binned ones are forced) with each
sampler forced and with the automatic choice, on tables like a run's: a sparse 32 000-label
law with unequal groups (most labels seen once: the unmerged table of the Monte Carlo
fallback), and a binned table of ~20 bins. Prints seconds per p-value and the ratios.

    python benchmarks/bench_conditional_mc.py [--level 1e-3] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from speceq.stats import chisquare_homogeneity, montecarlo


def _tables(seed: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    binned = rng.dirichlet(np.full(20, 2.0))
    while True:  # a sparse pair where fewer than two bins meet the rule: the unmerged fallback
        sparse = rng.dirichlet(np.full(32_000, 0.02))
        a, b = rng.multinomial(3000, sparse), rng.multinomial(600, sparse)
        if chisquare_homogeneity(a, b, method="asymptotic").n_bins < 2:
            break
    return {
        f"sparse V=32000, 3000 + 600 (unmerged, {int(((a + b) > 0).sum())} labels)": (a, b),
        "20 labels, 3000 + 600": (rng.multinomial(3000, binned), rng.multinomial(600, binned)),
        "20 labels, 30000 + 6000": (rng.multinomial(30_000, binned), rng.multinomial(6_000, binned)),
    }


def _seconds(a: np.ndarray, b: np.ndarray, level: float, items_per_colour: float, repeat: int) -> tuple[float, str]:
    saved = montecarlo._COUNT_ITEMS_PER_COLOUR
    montecarlo._COUNT_ITEMS_PER_COLOUR = items_per_colour
    try:
        best = float("inf")
        for _ in range(repeat):
            start = time.perf_counter()
            res = chisquare_homogeneity(a, b, method="monte-carlo" if a.size <= 20 else "auto", mc_level=level, mc_stop_after=None,
                                        rng=np.random.default_rng(0))
            best = min(best, time.perf_counter() - start)
        return best, res.method
    finally:
        montecarlo._COUNT_ITEMS_PER_COLOUR = saved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--level", type=float, default=1e-3, help="mc_level: 20 / level null tables. Default: 1e-3")
    ap.add_argument("--repeat", type=int, default=3, help="best of this many timings. Default: 3")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    draws = montecarlo.mc_draws_for_level(args.level)
    print(f"one Monte Carlo p-value, {draws} null tables, best of {args.repeat}\n")
    print("| table | marginals (s) | count (s) | automatic (s) | marginals / automatic |")
    print("|---|---:|---:|---:|---:|")
    for name, (a, b) in _tables(args.seed).items():
        marginals, method = _seconds(a, b, args.level, 0.0, args.repeat)
        count, _ = _seconds(a, b, args.level, float("inf"), args.repeat)
        auto, _ = _seconds(a, b, args.level, montecarlo._COUNT_ITEMS_PER_COLOUR, args.repeat)
        if method != "monte-carlo":
            raise SystemExit(f"{name}: the function took the {method} path, not the Monte Carlo one")
        print(f"| {name} | {marginals:.3f} | {count:.3f} | {auto:.3f} | {marginals / auto:.1f}x |")


if __name__ == "__main__":
    main()
