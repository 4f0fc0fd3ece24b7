"""Samples per engine at which speceq's sampled-rows analysis detects each gallery mutant.

The "speceq (sampled rows)" column of the power table, alone: for each mutant of the gallery,
the full analysis (oracle on, every primary test, Holm) of n baseline and n candidate rows,
``--reps`` repetitions on disjoint slices of seeded sample pools, at sizes of the grid in
increasing order until the rejection rate at ``--alpha`` reaches 0.9, and whether it is
``shifted`` at the default budget (3 000, alpha 1e-3, ``--budget-reps`` repetitions) (the same cases, pools,
seeds and rule as ``speceq power``, whose other columns this script does not run).
Run it with two versions of the package to compare their power on the same samples.

Usage::

    python benchmarks/speceq_power.py --mutants resample-from-target,mixture
    python benchmarks/speceq_power.py            # every non-lossless mutant, reps 20 (the full table)
"""

from __future__ import annotations

import argparse
import sys
import time

GRID = (1, 2, 3, 5, 10, 15, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mutants", default="", help="comma-separated gallery names (default: every non-lossless one)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--alpha", type=float, default=0.01)
    ap.add_argument("--grid", default=",".join(str(g) for g in GRID))
    ap.add_argument("--start", type=int, default=1, help="skip grid sizes below this")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=int, default=3000, help="the default budget of speceq run")
    ap.add_argument("--budget-reps", type=int, default=3, help="repetitions at the budget (alpha 1e-3); 0: skip")
    args = ap.parse_args(argv)
    import speceq
    from speceq.engines.mutants import MUTANTS
    from speceq.power.pools import SamplePool
    from speceq.power.settings import PowerSettings
    from speceq.power.study import PowerStudy

    names = [m for m in args.mutants.split(",") if m] or [n for n, s in MUTANTS.items() if not s.lossless]
    grid = [int(g) for g in args.grid.split(",") if int(g) >= args.start]
    t0 = time.time()

    def log(msg: str) -> None:
        print(f"[{time.time() - t0:6.0f} s] {msg}", file=sys.stderr, flush=True)

    settings = PowerSettings(mode="full", reps=args.reps, alpha=args.alpha, seed=args.seed)
    cal = PowerStudy(settings, log=log)
    from speceq.oracles.hf import TargetOracle
    print(f"speceq from {speceq.__file__}; reps {args.reps}, alpha {args.alpha:g}\n")
    print(f"| mutant | samples per engine to detect (rate >= 0.9) | rates along the grid | shifted at {args.budget} "
          "(alpha 1e-3) |")
    print("|---|---|---|---|")
    for name in names:
        spec = MUTANTS[name]
        engine = cal.engine(spec)
        case = cal.case(name, spec)
        oracle = TargetOracle(cal.baseline.model, draft=engine.draft)
        base, cand = cal.baseline_pool(case), SamplePool(engine, case, seed=args.seed, label=f"candidate|{name}")
        found, trail = None, []
        for n in grid:
            log(f"{name}: {args.reps} x {n}")
            rate, _ = cal.speceq_rates(case, base, cand, oracle, n, args.reps)
            trail.append(f"{n}: {rate:.2f}")
            if rate >= 0.9:
                found = n
                break
        at_budget = "—"
        if args.budget_reps:
            log(f"{name}: {args.budget_reps} x {args.budget} (the default budget)")
            rate = cal.speceq_rates(case, base, cand, oracle, args.budget, args.budget_reps)[1]
            at_budget = f"{round(rate * args.budget_reps)}/{args.budget_reps}"
        print(f"| {name} | {found if found is not None else 'not at ' + str(grid[-1])} | {', '.join(trail)} | "
              f"{at_budget} |", flush=True)
    log("done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
