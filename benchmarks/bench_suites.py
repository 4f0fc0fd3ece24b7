"""The ready-made suites against the default ``speceq run``: wall and CPU seconds, and their ratio, from one run.

Runs, one after the other in fresh folders, (1) the README's ``speceq run`` (bundled models,
``baseline`` vs ``reference``, the default cases, ``--workers auto``) with ``--samples RUN``,
and (2) ``python -m pytest --pyargs speceq.suites --speceq-samples=SUITE`` (all 25 tests, default
candidate ``reference``, ``SPECEQ_TORCH_THREADS=1`` as in the example CI workflow, a fresh
``--speceq-store``). For each it prints wall seconds and CPU seconds (user + system of the
command and every process it started), and the ratios suites / run. The issue's goal is the
suites at 500 samples within 4x the default run (3 000 samples); ``--scale F`` runs both at F
times those budgets (``--scale 0.2``: 600 and 100), for a shared machine where the full pair
takes too long. It also prints the suites' slowest tests (pytest's ``--durations``).

Usage::

    python benchmarks/bench_suites.py                 # 3000 vs 500: the goal's budgets
    python benchmarks/bench_suites.py --scale 0.2     # 600 vs 100
    python benchmarks/bench_suites.py --xdist 2       # the suites on two pytest-xdist processes
    python benchmarks/bench_suites.py --workers 2     # both sides on 2 worker processes, whatever the load

Both sides use the same worker-process default (``--workers auto`` of ``speceq run``, the suites'
``--speceq-workers``), which on a machine whose CPUs other jobs keep busy is 1: each run and each
check then samples in its own process. ``--workers N`` gives both sides N worker processes instead.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(command: list[str], env: dict[str, str], log: Path) -> tuple[float, float, int]:
    """(wall s, CPU s of the command and its children, exit status); output into ``log``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with open(log, "w", encoding="utf-8") as out:
        code = subprocess.run(command, env=env, stdout=out, stderr=subprocess.STDOUT, check=False).returncode
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the goal's budgets (default 1)")
    parser.add_argument("--keep", type=Path, default=None, help="keep the output folders and logs here")
    parser.add_argument("--xdist", type=int, default=0,
                        help="run the suites on N pytest-xdist processes (-n N; default 0: one process)")
    parser.add_argument("--workers", type=int, default=0,
                        help="worker processes of both sides (speceq run --workers N, the suites' --speceq-workers=N; "
                             "default 0: their default, auto)")
    args = parser.parse_args(argv)
    run_samples = max(1, round(3000 * args.scale))
    suite_samples = max(1, round(500 * args.scale))
    root = args.keep or Path(tempfile.mkdtemp(prefix="speceq-bench-suites-"))
    root.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    print(f"speceq run --samples {run_samples} vs the suites at --speceq-samples={suite_samples}; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; folders in {root}", flush=True)
    run_cmd = [sys.executable, "-m", "speceq", "run", "--samples", str(run_samples), "--out", str(root / "run"),
               "--fresh", "--no-progress"] + (["--workers", str(args.workers)] if args.workers else [])
    wall_r, cpu_r, code_r = timed(run_cmd, env, root / "run.log")
    print(f"speceq run: {wall_r:.1f} s wall, {cpu_r:.1f} s CPU, exit {code_r}; load {os.getloadavg()[0]:.2f}",
          flush=True)
    suite_cmd = [sys.executable, "-m", "pytest", "--pyargs", "speceq.suites", "-q", "-p", "no:cacheprovider",
                 f"--speceq-samples={suite_samples}", f"--speceq-store={root / 'store'}", "--durations=8"]
    suite_cmd += [f"--speceq-workers={args.workers}"] if args.workers else []
    suite_cmd += ["-n", str(args.xdist)] if args.xdist else ["-p", "no:xdist"]
    wall_s, cpu_s, code_s = timed(suite_cmd, {**env, "SPECEQ_TORCH_THREADS": "1"}, root / "suites.log")
    print(f"suites: {wall_s:.1f} s wall, {cpu_s:.1f} s CPU, exit {code_s}; load {os.getloadavg()[0]:.2f}", flush=True)
    print(f"ratio suites / run: wall {wall_s / wall_r:.2f}x, CPU {cpu_s / cpu_r:.2f}x (goal: <= 4x)")
    lines = (root / "suites.log").read_text(encoding="utf-8").splitlines()
    shown = [ln for ln in lines if " call " in ln or ln.startswith(("=", "FAILED", "ERROR")) or " passed" in ln]
    print("\n".join(shown[-14:]))
    return 0 if code_r in (0, 3) and code_s == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
