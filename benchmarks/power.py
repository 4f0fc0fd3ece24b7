"""Power of speceq and of the engines' own checks against the mutant gallery.

Runs the calibration of ``speceq calibrate`` (same options: ``--quick`` / ``--full`` and
overrides), prints the markdown tables and the time each variant took, and writes
power.md, power.json and power-curve.svg into ``--out``. ``docs/POWER.md`` is a copy of a
run's power.md with the command that made it.

Usage: python benchmarks/power.py [--quick | --full] [--out DIR] [--mutants a,b] [--reps R] ...
"""

from __future__ import annotations

import argparse
import sys
import time

from harness.calibrate.power import calibrate
from harness.calibrate.tables import markdown, write_outputs
from harness.cli_calibrate import add_arguments, settings_from_args


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    settings = settings_from_args(args)
    start = time.perf_counter()

    def log(message: str) -> None:
        if not args.quiet:
            print(f"[{time.perf_counter() - start:7.1f}s] {message}", file=sys.stderr, flush=True)

    report = calibrate(settings, threads=args.threads, log=log)
    paths = write_outputs(report, args.out)
    print(markdown(report))
    print("seconds per variant:")
    for v in report.variants:
        print(f"  {v.name:<26} {v.seconds:8.1f}")
    print(f"total: {time.perf_counter() - start:.1f} s; written: " + ", ".join(str(p) for p in paths.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
