"""``speceq power``: power of speceq and of the engines' own checks against the mutant gallery.

Writes ``power.md``, ``power.json`` and ``power-curve.svg`` into ``--out`` and prints the
markdown. ``--quick`` (the default) takes minutes on two busy cores; ``--full`` an hour or
more. Exit code 0 when it ran (the goals' outcomes are in the tables), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from speceq.power.settings import PowerSettings

HELP = "measure how many samples speceq and the engines' own checks need to catch each mutant"


def _sizes(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one size")
    return values


def _mixes(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def _names(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def add_arguments(p: argparse.ArgumentParser) -> None:
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", dest="mode", action="store_const", const="quick", default="quick",
                      help="small repetitions and grids: minutes (default)")
    mode.add_argument("--full", dest="mode", action="store_const", const="full", help="the full sweep: an hour or more")
    g = p.add_argument_group("overrides of the mode's settings")
    g.add_argument("--mutants", type=_names, metavar="A,B", help="gallery names to run (default: all, plus the reference)")
    g.add_argument("--reps", type=int, metavar="R", help="repetitions of engine-sampled measurements")
    g.add_argument("--grid", type=_sizes, metavar="N1,N2", help="samples per engine tried for speceq")
    g.add_argument("--sim-reps", type=int, metavar="R", help="repetitions of simulated first-token methods")
    g.add_argument("--null-reps", type=int, metavar="R", help="simulations under H0 per calibrated threshold")
    g.add_argument("--false-alarm-n", type=int, metavar="N", help="samples per engine on the lossless variants")
    g.add_argument("--false-alarm-reps", type=int, metavar="R", help="repetitions on the lossless variants")
    g.add_argument("--budget", type=int, metavar="N", help="samples per engine of the default-budget check "
                   "(default: speceq run's default)")
    g.add_argument("--budget-reps", type=int, metavar="R", help="repetitions at the default budget of speceq run")
    g.add_argument("--curve-mix", type=_mixes, metavar="M1,M2", help="mixture weights of the power curve")
    g.add_argument("--curve-n", type=int, metavar="N", help="samples per engine of the power curve")
    g.add_argument("--curve-reps", type=int, metavar="R", help="repetitions per power-curve point")
    g.add_argument("--ceiling-rows", type=int, metavar="N", help="mutant rows for the one-row TVs of the one-sample "
                   "ceiling")
    g.add_argument("--alpha", type=float, help="false-alarm level of every method. Default: 0.01")
    g.add_argument("--seed", type=int, help="seed of every pool and simulation. Default: 0")
    g = p.add_argument_group("output")
    g.add_argument("--out", default="speceq-power", metavar="DIR",
                   help="folder for power.md, power.json, power-curve.svg. Default: %(default)s")
    g.add_argument("--threads", type=int, default=None, metavar="N", help="torch threads (default: 1)")
    g.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def settings_from_args(args: argparse.Namespace) -> PowerSettings:
    """The mode's preset with the options given on the command line."""
    from speceq.power.settings import settings_for

    return settings_for(
        args.mode, mutants=args.mutants, reps=args.reps, grid=args.grid, sim_reps=args.sim_reps,
        null_reps=args.null_reps, false_alarm_n=args.false_alarm_n, false_alarm_reps=args.false_alarm_reps,
        budget=args.budget, budget_reps=args.budget_reps, curve_mix=args.curve_mix, curve_n=args.curve_n,
        curve_reps=args.curve_reps, alpha=args.alpha, seed=args.seed, ceiling_rows=args.ceiling_rows,
    )


def handle(args: argparse.Namespace) -> int:
    from speceq.power.study import measure_power
    from speceq.power.tables import markdown, write_outputs

    settings = settings_from_args(args)
    start = time.perf_counter()

    def log(message: str) -> None:
        if not args.quiet:
            print(f"[{time.perf_counter() - start:7.1f}s] {message}", file=sys.stderr, flush=True)

    result = measure_power(settings, threads=args.threads, log=log)
    paths = write_outputs(result, args.out)
    print(markdown(result))
    print("seconds per variant:")
    for v in result.variants:
        print(f"  {v.name:<26} {v.seconds:8.1f}")
    print(f"total: {time.perf_counter() - start:.1f} s; written: " + ", ".join(str(p) for p in paths.values()))
    return 0
