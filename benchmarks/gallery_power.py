"""Power of speceq and of the engines' own checks against the mutant gallery.

Runs the calibration of ``speceq power`` (same options: ``--quick`` / ``--full`` and
overrides), prints the markdown tables and the time each variant took, and writes
power.md, power.json and power-curve.svg into ``--out``. ``docs/measurements/power.md`` is a copy of a
run's power.md with the command that made it.

Usage: python benchmarks/gallery_power.py [--quick | --full] [--out DIR] [--mutants a,b] [--reps R] ...
"""

from __future__ import annotations

import argparse
import sys

from speceq.faces.cli_power import add_arguments, handle


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    return handle(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
