"""Samples per engine at which speceq's sampled-rows analysis detects each gallery mutant.

The "speceq (sampled rows)" column of the power table, alone: for each mutant of the gallery,
the full analysis (oracle on, every primary test, Holm) of n baseline and n candidate rows,
``--reps`` repetitions on disjoint slices of seeded sample pools, at sizes of the grid in
increasing order until the rejection rate at ``--alpha`` reaches 0.9, and whether it is
``shifted`` at the default budget (3 000, alpha 1e-3, ``--budget-reps`` repetitions) (the same cases, pools,
seeds and rule as ``speceq power``, whose other columns this script does not run).
Run it with two versions of the package to compare their power on the same samples.
A lossless variant (or ``reference``, the reference engine itself) as ``--mutants`` with
``--grid 1000 --budget-reps 0`` gives speceq's false-alarm rate on it (``speceq power``'s
lossless column). ``--greedy-reps R`` adds the greedy columns: greedy exact match and speceq's
greedy check at 1, 2, 4, ... 64 greedy rows, R repetitions (``speceq power --full``'s grid),
and the greedy one-row TV. ``--ceiling-rows N`` adds the sampled-row one-row TVs of the one-sample
ceiling (support and mixture mutants, N rows). ``--curve-mix M1,M2`` adds the mixture power
curve (speceq at ``--curve-n`` samples per engine, ``--curve-reps`` repetitions; the simulated
first-token methods at 400 repetitions, 2 000 null simulations, as ``speceq power --full``).

Usage::

    python benchmarks/speceq_power.py --mutants resample-from-target,mixture
    python benchmarks/speceq_power.py            # every non-lossless mutant, reps 20 (the full table)
    python benchmarks/speceq_power.py --mutants k1,reference --grid 1000 --reps 100 --budget-reps 0
    python benchmarks/speceq_power.py --grid 1 --reps 1 --budget-reps 0 --greedy-reps 20 --ceiling-rows 4000
    python benchmarks/speceq_power.py --mutants mixture --grid 1 --reps 1 --budget-reps 0 \
        --curve-mix 0.025,0.05,0.1,0.15,0.2,0.3,0.5
"""

from __future__ import annotations

import argparse
import sys
import time

GRID = (1, 2, 3, 5, 10, 15, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)
GREEDY_GRID = (1, 2, 4, 8, 16, 32, 64)
REFERENCE = "reference"


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
    ap.add_argument("--greedy-reps", type=int, default=0,
                    help="repetitions of the greedy checks at 1, 2, 4, ... 64 rows; 0 (default): skip")
    ap.add_argument("--ceiling-rows", type=int, default=0,
                    help="mutant rows for the sampled-row one-row TVs (support, mixture); 0 (default): skip")
    ap.add_argument("--curve-mix", default="", help="mixture weights of the power curve (default: none)")
    ap.add_argument("--curve-n", type=int, default=1000, help="samples per engine of the power curve")
    ap.add_argument("--curve-reps", type=int, default=20, help="repetitions per power-curve point")
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

    settings = PowerSettings(mode="full", reps=args.reps, alpha=args.alpha, seed=args.seed,
                             greedy_grid=GREEDY_GRID, ceiling_rows=max(args.ceiling_rows, 1), curve_n=args.curve_n,
                             curve_reps=args.curve_reps, sim_reps=400, null_reps=2000)
    cal = PowerStudy(settings, log=log)
    from speceq.oracles.hf import TargetOracle
    print(f"speceq from {speceq.__file__}; reps {args.reps}, alpha {args.alpha:g}\n")
    print(f"| mutant | samples per engine to detect (rate >= 0.9) | rates along the grid | shifted at {args.budget} "
          "(alpha 1e-3) |")
    print("|---|---|---|---|")
    greedy_lines, ceiling_lines = [], []
    for name in names:
        spec = None if name == REFERENCE else MUTANTS[name]
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
        if args.greedy_reps:
            log(f"{name}: greedy checks, {args.greedy_reps} repetitions")
            exact, mine, row_tv = cal.greedy_checks(name, spec, engine, oracle, args.greedy_reps)
            greedy_lines.append(" | ".join([name] + [", ".join(f"{n}: {r:.2f}" for n, r in zip(d.sizes, d.rates))
                                                     for d in (mine, exact)] + [row_tv.summary()]))
        if args.ceiling_rows and spec is not None and spec.row_law is not None:
            log(f"{name}: one-row TV of {args.ceiling_rows} sampled rows")
            row_tv = cal.sampled_row_tv(spec, engine, case, cand, oracle)
            ceiling_lines.append(f"| {name} | {row_tv.summary()} |")
    if greedy_lines:
        print(f"\n| variant | speceq greedy check, rate at alpha {args.alpha:g} per rows | greedy exact match, per rows "
              "| greedy one-row TV |")
        print("|---|---|---|---|")
        for line in greedy_lines:
            print(f"| {line} |")
    if ceiling_lines:
        print("\n| mutant | sampled-row one-row TV |\n|---|---|")
        print("\n".join(ceiling_lines))
    mixes = [float(m) for m in args.curve_mix.split(",") if m]
    if mixes:
        print(f"\n| mix | TV | rates at {args.curve_n} samples per engine (speceq: {args.curve_reps} repetitions; "
              "simulated methods: 400) |\n|---|---|---|")
        for mix in mixes:
            point = cal.curve_point(mix)
            rates = ", ".join(f"{m} {r:.2f}" for m, r in point.rates.items())
            print(f"| {mix:g} | {point.tv:.4f} | {rates} |", flush=True)
    log("done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
