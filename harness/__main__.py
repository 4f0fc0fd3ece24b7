"""``python -m speceq``: the command-line interface (same as the ``speceq`` console script)."""

from speceq.faces.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
