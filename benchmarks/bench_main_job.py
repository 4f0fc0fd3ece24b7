"""The main job (`speceq run` with the built-in cases) on the transformers path vs the fast path.

Runs the same job in ONE process once per path, each into its own fresh output folder with
freshly loaded engines: ``transformers`` (every model forward through transformers, today's
serial path), ``fast`` (the lean bit-identical forward of :mod:`speceq.models.fast_forward`
with its memo of the first forwards) and, when asked for, ``fast-shared-oracle`` (the fast
path with ``TargetOracle(share_prefix=True)``, whose oracle numbers match to float32
rounding only). Prints per path the CPU seconds (``time.process_time``) and wall seconds of
sampling per engine, of oracle scoring and of the rest (analysis and store I/O), the ratios
to the first path, and checks that every path stored identical samples and gave identical
verdicts and TV figures (exit status 1 if not), and whether every other result field
(except timings and provenance) is identical. The machine may be shared: ratios and CPU
seconds are the stable numbers.

Usage: python benchmarks/bench_main_job.py [--samples 3000] [--chunk-size 500] [--seed 0]
       [--paths transformers fast fast-shared-oracle] [--no-oracle] [--out DIR] [--keep] [--no-warmup]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from speceq.cases import default_cases
from speceq.defaults import DEFAULT_CHUNK_SIZE, DEFAULT_SAMPLES
from speceq.models.fast_forward import fast_forward_enabled
from speceq.oracle import TargetOracle
from speceq.run import RunConfig, resolve_engines, run
from speceq.store import SampleStore

#: path name -> (fast forward on, oracle shares prompt prefixes)
PATHS = {"transformers": (False, False), "fast": (True, False), "fast-shared-oracle": (True, True)}
# result fields that measure time or record where/when, not what was decided
VOLATILE = ("per_s", "speedup", "time", "elapsed", "provenance", "created", "finished", "wall")


class Clock:
    """Accumulated wall and CPU seconds per phase."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)

    def wrap(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            w, c = time.perf_counter(), time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.wall[phase] += time.perf_counter() - w
                self.cpu[phase] += time.process_time() - c

        return timed


def run_path(path: str, out: Path, args: argparse.Namespace) -> tuple[Clock, dict[str, Any]]:
    """One main job; returns its phase clock and result dict."""
    fast, share_prefix = PATHS[path]
    clock = Clock()
    config = RunConfig(samples=args.samples, chunk_size=args.chunk_size, seed=args.seed, oracle=not args.no_oracle,
                       out_dir=out, resume=False, progress=False)
    originals = {name: getattr(TargetOracle, name)
                 for name in ("__init__", "score", "next_token_probs", "raw_top2_margin")}

    def init(self: TargetOracle, *a: Any, **k: Any) -> None:
        k.setdefault("share_prefix", share_prefix)  # speceq.run builds the oracle with the defaults
        originals["__init__"](self, *a, **k)

    with fast_forward_enabled(fast):
        w, c = time.perf_counter(), time.process_time()
        engines = resolve_engines(config)
        for role, engine in engines.items():
            engine.sample = clock.wrap(f"sampling {role}", engine.sample)
        for name, fn in originals.items():
            setattr(TargetOracle, name, init if name == "__init__" else clock.wrap("oracle", fn))
        try:
            result = run(config, default_cases(), engines=engines)
        finally:
            for name, fn in originals.items():
                setattr(TargetOracle, name, fn)
        clock.wall["total"] = time.perf_counter() - w
        clock.cpu["total"] = time.process_time() - c
    for table in (clock.wall, clock.cpu):
        table["analysis and I/O (rest)"] = table["total"] - sum(v for k, v in table.items() if k != "total")
    return clock, json.loads(result.to_json())


def decisions(result: Any) -> Any:
    """The result without timing and provenance fields."""
    if isinstance(result, dict):
        return {k: decisions(v) for k, v in result.items() if not any(s in k for s in VOLATILE)}
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=DEFAULT_SAMPLES)
    parser.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--paths", nargs="+", choices=list(PATHS), default=["transformers", "fast"],
                        help="paths to run; the first is the reference of the ratios and comparisons")
    parser.add_argument("--no-oracle", action="store_true")
    parser.add_argument("--out", type=Path, default=None, help="folder for the runs' outputs (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the output folders")
    parser.add_argument("--no-warmup", action="store_true",
                        help="skip the untimed 10-sample run of each path that loads every module first")
    args = parser.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="speceq-bench-main-"))
    if not args.no_warmup:  # imports and first-call costs would otherwise land on whichever path runs first
        warm = argparse.Namespace(**{**vars(args), "samples": 10, "chunk_size": 10})
        for path in args.paths:
            run_path(path, root / f"warmup-{path}", warm)
    print(f"main job: {len(default_cases())} built-in cases, {args.samples} samples per engine, "
          f"chunk {args.chunk_size}, seed {args.seed}, oracle {'off' if args.no_oracle else 'on'}")
    clocks: dict[str, Clock] = {}
    results: dict[str, Any] = {}
    try:
        for path in args.paths:
            clocks[path], results[path] = run_path(path, root / path, args)
            print(f"  {path}: {clocks[path].wall['total']:.1f} s wall, {clocks[path].cpu['total']:.1f} s CPU",
                  flush=True)
        ref = args.paths[0]
        phases = list(clocks[ref].cpu)
        print(f"\n{'phase':<26}" + "".join(f"{p:>22}" for p in args.paths) + "   (CPU s / wall s; ratio to "
              f"{ref} in CPU)")
        for phase in phases:
            cells = []
            for p in args.paths:
                cpu, wall = clocks[p].cpu[phase], clocks[p].wall[phase]
                ratio = f" {clocks[ref].cpu[phase] / cpu:5.2f}x" if p != ref and cpu > 0 else ""
                cells.append(f"{cpu:8.1f}/{wall:7.1f}{ratio}")
            print(f"{phase:<26}" + "".join(f"{c:>22}" for c in cells))
        disagree = False
        for p in args.paths[1:]:
            print(f"\nspeed-up {ref} -> {p}: {clocks[ref].cpu['total'] / clocks[p].cpu['total']:.2f}x CPU, "
                  f"{clocks[ref].wall['total'] / clocks[p].wall['total']:.2f}x wall")
            same_store = same_samples(root / ref, root / p)
            a, b = decisions(results[ref]), decisions(results[p])
            same_result = json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
            same_verdicts = [c["verdict"] for c in a["cases"]] == [c["verdict"] for c in b["cases"]]
            same_tv = all(ca[k] == cb[k] for ca, cb in zip(a["cases"], b["cases"], strict=True)
                          for k in ("tv_estimate", "tv_reference", "tv_upper_bound"))
            print(f"identical stored samples: {same_store}; verdicts: {same_verdicts}; TV figures: {same_tv}; "
                  f"every other field: {same_result} (largest relative difference {largest_gap(a, b):.1e})")
            disagree |= not (same_store and same_verdicts and same_tv)
        print(f"verdicts: { {c['case_id']: c['verdict'] for c in results[ref]['cases']} }")
        if disagree:
            raise SystemExit("the paths disagree")
    finally:
        if args.keep or args.out:
            print(f"outputs kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
