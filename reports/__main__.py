"""``speceq report RESULT.json [-o REPORT.html]``: write the HTML report of a saved result.

Exit status 0 when the page was written (whatever the verdict), 2 when the result cannot be
read or rendered (the message says which file and why).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from speceq.errors import ConfigError
from speceq.reports.render import write_report
from speceq.verdicts.result import EXIT_USAGE, RunResult


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="speceq report", description="Render a saved speceq result (JSON) as one HTML page.")
    p.add_argument("result", type=Path, help="result JSON written by a speceq run")
    p.add_argument("-o", "--output", type=Path, default=None,
                   help="HTML file to write. Default: RESULT with the suffix .html")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments, render, write; return the exit status."""
    args = _parser().parse_args(argv)
    out = args.output if args.output is not None else args.result.with_suffix(".html")
    try:
        text = args.result.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        print(f"error: cannot read {args.result}: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:
        result = RunResult.from_json(text)
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        print(f"error: {args.result} is not a speceq result ({type(e).__name__}: {e})", file=sys.stderr)
        return EXIT_USAGE
    try:
        path = write_report(result, out)
    except ConfigError as e:
        print(f"error: {args.result}: {e}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as e:
        print(f"error: cannot write {out}: {e}", file=sys.stderr)
        return EXIT_USAGE
    print(f"{result.summary()}\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
