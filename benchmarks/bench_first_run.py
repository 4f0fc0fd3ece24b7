"""A newcomer's first run: clone, install, and the README's ``speceq run`` right away, timed.

``python benchmarks/bench_first_run.py`` clones this checkout's HEAD into a temporary folder,
installs it into a fresh virtual environment and, with no pause, runs the README's main job
(``speceq run``) from the clone, as a new user would. It prints the wall time of the install and
of the run, the worker count ``--workers auto`` chose and why (its log line), and the 1-minute
load average at that moment, which the old rule (CPUs minus the load average) would have read.

``--full-install`` runs the README's own install command in a plain virtual environment (the
CPU torch wheel, then ``pip install -e .``: minutes); the default reuses this machine's packages
(``--system-site-packages`` and ``pip install --no-deps -e .``), which is quicker and leaves the
same kind of load behind (a build process on both cores right before the run).
``--samples`` (default: the README's, 3 000) and ``--keep`` (keep the clone and its output).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def timed(cmd: list[str], **kw: object) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    return time.perf_counter() - t0, proc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full-install", action="store_true", help="the README's install command in a plain venv")
    ap.add_argument("--samples", type=int, default=None, help="samples per engine (default: the README's run)")
    ap.add_argument("--keep", action="store_true", help="keep the clone, its venv and its output")
    args = ap.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="speceq-first-run-"))
    clone, venv = work / "speceq", work / "venv"
    try:
        subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
        head = subprocess.run(["git", "-C", str(clone), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        venv_args = [] if args.full_install else ["--system-site-packages"]
        subprocess.run([sys.executable, "-m", "venv", *venv_args, str(venv)], check=True)
        py = str(venv / "bin" / "python")
        if args.full_install:
            install = [["-m", "pip", "install", "-q", "torch==2.13.0"], ["-m", "pip", "install", "-q", "-e", "."]]
        else:
            install = [["-m", "pip", "install", "-q", "--no-deps", "-e", "."]]
        install_s = 0.0
        for step in install:
            seconds, proc = timed([py, *step], cwd=clone)
            install_s += seconds
            if proc.returncode != 0:
                print(proc.stderr[-3000:], file=sys.stderr)
                return 2
        load = os.getloadavg()[0]
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        run = [str(venv / "bin" / "speceq"), "run", "--no-progress"]
        if args.samples:
            run += ["--samples", str(args.samples)]
        run_s, proc = timed(run, cwd=clone)
        chosen = re.search(r"--workers auto: [^)]*\)", proc.stderr)
        verdict = re.search(r"run verdict [A-Z]+[^\n]*", proc.stdout)
        old_rule = max(1, min(cpus, math.ceil(cpus - load - 0.25)))
        print(f"first run on a fresh clone of {head} ({'README install' if args.full_install else 'quick install'}), "
              f"{cpus} usable CPUs, {time.strftime('%Y-%m-%d %H:%M')}")
        print(f"  install: {install_s:.1f} s")
        print(f"  speceq run: {run_s:.1f} s wall, exit code {proc.returncode}")
        print(f"  {chosen.group(0) if chosen else 'serial: no --workers auto line (one chunk, or one worker)'}")
        print(f"  1-minute load average when the run started: {load:.2f} (the old rule would have chosen "
              f"{old_rule} worker{'s' if old_rule > 1 else ''})")
        print(f"  {verdict.group(0) if verdict else proc.stdout[-500:]}")
        return 0 if proc.returncode in (0, 1, 3) else proc.returncode
    finally:
        if args.keep:
            print(f"kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
