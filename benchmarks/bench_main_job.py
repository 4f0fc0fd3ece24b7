"""The main job (`speceq run` with the built-in cases): today's serial path vs the CLI with executors.

Runs the same job once per path, each through the real command line (``speceq.faces.cli.main``,
``speceq run --fresh --no-progress --workers ...``) into its own fresh output folder, in
this process (worker processes are its children). Paths:

- ``transformers``: every model forward through transformers, serial (``SPECEQ_FAST_FORWARD=0``);
- ``fast``: the lean bit-identical forward of :mod:`speceq.models.fast_forward`, serial
  (``--workers 1``), whole-row oracle (``--no-oracle-share-prefix``): the default path before
  the executors and the shared-prefix oracle;
- ``fast-shared-oracle``: ``fast`` with ``--oracle-share-prefix`` (oracle log-probabilities
  equal to 1e-5, not bit for bit);
- ``executors``: ``--workers auto``, whole-row oracle: sampling and oracle scoring on worker
  processes, the same numbers bit for bit as ``fast``;
- ``executors-shared-oracle``: ``--workers auto --oracle-share-prefix``: today's default.

Prints per path the wall seconds of loading, collection and the rest (oracle + analysis +
writing), the engines' own sampling seconds per engine (summed over chunks, whichever process
sampled them), the oracle's scoring seconds (driver, or workers plus the driver's wait), the
CPU seconds of this process and of its worker processes, the ratios to the first path, and
whether every path stored identical samples and gave identical verdicts and TV figures (exit
status 1 if not), and whether every other result field (except timings and provenance) is
identical. The machine may be shared: say its load (printed before and after) with the numbers.

Usage: python benchmarks/bench_main_job.py [--samples 3000] [--chunk-size 500] [--seed 0]
       [--paths fast executors ...] [--workers auto] [--no-oracle] [--out DIR] [--keep] [--no-warmup]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

import speceq.pipeline.fixed as fixedmod
import speceq.pipeline.runner as runmod
from speceq.core.defaults import DEFAULT_CHUNK_SIZE, DEFAULT_SAMPLES
from speceq.faces.cli import main as cli_main
from speceq.inputs.cases import default_cases
from speceq.models.fast_forward import FAST_FORWARD_ENV
from speceq.oracles.hf import TargetOracle
from speceq.pipeline.collect.oracle_tasks import PrefetchedOracle
from speceq.pipeline.config import PROVENANCE_FILE, RESULT_FILE
from speceq.store import SampleStore

#: path name -> (fast forward on, oracle shares prompt prefixes, executors on)
PATHS = {"transformers": (False, False, False), "fast": (True, False, False),
         "fast-shared-oracle": (True, True, False), "executors": (True, False, True),
         "executors-shared-oracle": (True, True, True)}
# result fields that measure time or record where/when, not what was decided
VOLATILE = ("per_s", "speedup", "time", "elapsed", "provenance", "created", "finished", "wall")


class Clock:
    """Accumulated wall seconds per phase (driver), plus CPU of this process and its children."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = defaultdict(float)

    def wrap(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            w = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.wall[phase] += time.perf_counter() - w

        return timed


@contextlib.contextmanager
def patched(obj: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_path(path: str, out: Path, args: argparse.Namespace) -> tuple[Clock, dict[str, Any]]:
    """One main job through the CLI; returns its clock and result dict."""
    fast, share_prefix, executors = PATHS[path]
    clock = Clock()
    prefetched: list[PrefetchedOracle] = []

    def prefetch(session: Any, *a: Any, **k: Any) -> Any:
        got = prefetch_scores(session, *a, **k)
        if isinstance(got, PrefetchedOracle):
            prefetched.append(got)
        return got

    from speceq.pipeline.collect.session import ExecutorSession

    prefetch_scores = ExecutorSession.prefetch_scores
    argv = ["run", "--out", str(out), "--fresh", "--no-progress", "--json", "--samples", str(args.samples),
            "--chunk-size", str(args.chunk_size), "--seed", str(args.seed),
            "--workers", args.workers if executors else "1",
            "--oracle-share-prefix" if share_prefix else "--no-oracle-share-prefix"]
    argv += ["--no-oracle"] if args.no_oracle else []
    env_before = os.environ.get(FAST_FORWARD_ENV)
    os.environ[FAST_FORWARD_ENV] = "1" if fast else "0"  # workers inherit it
    w, c, cc = time.perf_counter(), time.process_time(), children_cpu()
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(patched(ExecutorSession, "prefetch_scores", prefetch))
            for name in ("score", "next_token_probs", "raw_top2_margin"):  # the driver's own oracle calls
                stack.enter_context(patched(TargetOracle, name, clock.wrap("oracle in the driver",
                                                                           getattr(TargetOracle, name))))
            stack.enter_context(patched(runmod, "resolve_engines", clock.wrap("loading engines",
                                                                               runmod.resolve_engines)))
            stack.enter_context(patched(fixedmod, "collect", clock.wrap("collection", fixedmod.collect)))
            stack.enter_context(patched(runmod, "make_oracle", clock.wrap("loading the oracle", runmod.make_oracle)))
            stack.enter_context(patched(fixedmod, "analyse_rows", clock.wrap("oracle + analysis", fixedmod.analyse_rows)))
            with contextlib.redirect_stdout(open(os.devnull, "w")):  # noqa: SIM115 (closed with the process)
                code = cli_main(argv)
    finally:
        if env_before is None:
            os.environ.pop(FAST_FORWARD_ENV, None)
        else:
            os.environ[FAST_FORWARD_ENV] = env_before
    clock.wall["total"] = time.perf_counter() - w
    clock.wall["CPU, this process"] = time.process_time() - c
    clock.wall["CPU, worker processes"] = children_cpu() - cc
    if code not in (0, 1, 3):
        raise SystemExit(f"{path}: speceq run exited with {code}")
    store = SampleStore(out)
    for key in store.keys():
        clock.wall[f"sampling {key.role} (engine s)"] += float(store.get_meta(key).get("elapsed_s", 0.0))
    if prefetched:
        clock.wall["oracle in workers (worker s)"] = sum(p.worker_seconds for p in prefetched)
        clock.wall["oracle: driver waiting"] = sum(p.wait_seconds for p in prefetched)
    provenance = json.loads((out / PROVENANCE_FILE).read_text())
    clock.executor = provenance.get("executor", "?")  # type: ignore[attr-defined]
    return clock, json.loads((out / RESULT_FILE).read_text())


def decisions(result: Any) -> Any:
    """The result without timing and provenance fields (and without the output folder in rerun commands)."""
    if isinstance(result, dict):
        return {k: re.sub(r" --out \S+", "", v) if k == "rerun_command" and isinstance(v, str) else decisions(v)
                for k, v in result.items() if not any(s in k for s in VOLATILE)}
    if isinstance(result, list):
        return [decisions(v) for v in result]
    return result


def largest_gap(a: Any, b: Any) -> float:
    """Largest relative difference between the numbers of two results of the same shape."""
    if isinstance(a, dict):
        return max((largest_gap(a[k], b.get(k)) for k in a), default=0.0)
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return max((largest_gap(x, y) for x, y in zip(a, b, strict=True)), default=0.0)
    if isinstance(a, float) and isinstance(b, float) and a != b:
        return abs(a - b) / max(abs(a), abs(b))
    return 0.0


def stored_samples(out: Path) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    return {key.label(): (batch.tokens, batch.lengths, batch.prompt_index) for key, batch in SampleStore(out).items()}


def same_samples(a: Path, b: Path) -> bool:
    sa, sb = stored_samples(a), stored_samples(b)
    return sa.keys() == sb.keys() and all(
        all(np.array_equal(x, y) for x, y in zip(sa[k], sb[k], strict=True)) for k in sa)


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=DEFAULT_SAMPLES)
    parser.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--paths", nargs="+", choices=list(PATHS), default=["fast", "executors-shared-oracle"],
                        help="paths to run; the first is the reference of the ratios and comparisons")
    parser.add_argument("--workers", default="auto", help="--workers of the executor paths (default: auto)")
    parser.add_argument("--no-oracle", action="store_true")
    parser.add_argument("--out", type=Path, default=None, help="folder for the runs' outputs (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the output folders")
    parser.add_argument("--no-warmup", action="store_true",
                        help="skip the untimed 10-sample run of each path that loads every module first")
    args = parser.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="speceq-bench-main-"))
    if not args.no_warmup:  # imports and first-call costs would otherwise land on whichever path runs first
        warm = argparse.Namespace(**{**vars(args), "samples": 10, "chunk_size": 10})
        for path in dict.fromkeys(PATHS[p][:2] for p in args.paths):
            name = next(p for p in args.paths if PATHS[p][:2] == path)
            run_path(name, root / f"warmup-{name}", warm)
    print(f"main job: {len(default_cases())} built-in cases, {args.samples} samples per engine, "
          f"chunk {args.chunk_size}, seed {args.seed}, oracle {'off' if args.no_oracle else 'on'}; "
          f"{os.cpu_count()} CPUs, {load()} at the start")
    clocks: dict[str, Clock] = {}
    results: dict[str, Any] = {}
    try:
        for path in args.paths:
            clocks[path], results[path] = run_path(path, root / path, args)
            print(f"  {path}: {clocks[path].wall['total']:.1f} s wall ({clocks[path].executor}); {load()}",
                  flush=True)
        ref = args.paths[0]
        phases = list(dict.fromkeys(k for p in args.paths for k in clocks[p].wall))
        print(f"\n{'seconds':<34}" + "".join(f"{p:>26}" for p in args.paths) + f"   (ratio: {ref} / path)")
        for phase in phases:
            cells = []
            for p in args.paths:
                v = clocks[p].wall.get(phase)
                r = clocks[ref].wall.get(phase)
                ratio = f" {r / v:5.2f}x" if p != ref and v and r else ""
                cells.append("" if v is None else f"{v:8.1f}{ratio}")
            print(f"{phase:<34}" + "".join(f"{c:>26}" for c in cells))
        disagree = False
        for p in args.paths[1:]:
            print(f"\nspeed-up {ref} -> {p}: {clocks[ref].wall['total'] / clocks[p].wall['total']:.2f}x wall")
            same_store = same_samples(root / ref, root / p)
            a, b = decisions(results[ref]), decisions(results[p])
            same_result = json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
            same_verdicts = [c["verdict"] for c in a["cases"]] == [c["verdict"] for c in b["cases"]]
            same_tv = all(ca[k] == cb[k] for ca, cb in zip(a["cases"], b["cases"], strict=True)
                          for k in ("tv_estimate", "tv_reference", "tv_upper_bound"))
            print(f"identical stored samples: {same_store}; verdicts: {same_verdicts}; TV figures: {same_tv}; "
                  f"every other field: {same_result} (largest relative difference {largest_gap(a, b):.1e})")
            disagree |= not (same_store and same_verdicts and same_tv)
        print(f"verdicts: { {c['case_id']: c['verdict'] for c in results[ref]['cases']} }; {load()} at the end")
        if disagree:
            raise SystemExit("the paths disagree")
    finally:
        if args.keep or args.out:
            print(f"outputs kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
