"""The main job (`speceq run` with the built-in cases) on the transformers path vs the fast path.

Runs the same job twice in ONE process, first with every model forward through transformers
(``fast_forward_enabled(False)``: today's serial path), then through the lean bit-identical
forward of :mod:`speceq.models.fast_forward` (with its prefill memo), each into its own fresh
output folder with freshly loaded engines. Prints per path: wall and CPU seconds
(``time.process_time``) of sampling per engine, of oracle scoring and of the rest of the
analysis, the fast/transformers ratios, and checks that both paths stored identical samples
and produced identical verdicts and figures (every result field except timings and
provenance). The machine may be shared: ratios and CPU seconds are the stable numbers.

Usage: python benchmarks/bench_main_job.py [--samples 3000] [--chunk-size 500] [--seed 0]
       [--paths transformers fast] [--no-oracle] [--out DIR] [--keep] [--no-warmup]
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

PATHS = {"transformers": False, "fast": True}
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


def run_path(fast: bool, out: Path, args: argparse.Namespace) -> tuple[Clock, dict[str, Any]]:
    """One main job; returns its phase clock and result dict."""
    clock = Clock()
    config = RunConfig(samples=args.samples, chunk_size=args.chunk_size, seed=args.seed, oracle=not args.no_oracle,
                       out_dir=out, resume=False, progress=False)
    originals = {name: getattr(TargetOracle, name) for name in ("score", "next_token_probs", "raw_top2_margin")}
    with fast_forward_enabled(fast):
        w, c = time.perf_counter(), time.process_time()
        engines = resolve_engines(config)
        for role, engine in engines.items():
            engine.sample = clock.wrap(f"sampling {role}", engine.sample)
        for name, fn in originals.items():
            setattr(TargetOracle, name, clock.wrap("oracle", fn))
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
    parser.add_argument("--paths", nargs="+", choices=list(PATHS), default=list(PATHS))
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
            run_path(PATHS[path], root / f"warmup-{path}", warm)
    print(f"main job: {len(default_cases())} built-in cases, {args.samples} samples per engine, "
          f"chunk {args.chunk_size}, seed {args.seed}, oracle {'off' if args.no_oracle else 'on'}")
    clocks: dict[str, Clock] = {}
    results: dict[str, Any] = {}
    try:
        for path in args.paths:
            clocks[path], results[path] = run_path(PATHS[path], root / path, args)
            print(f"  {path}: {clocks[path].wall['total']:.1f} s wall, {clocks[path].cpu['total']:.1f} s CPU",
                  flush=True)
        phases = list(clocks[args.paths[0]].cpu)
        head = "".join(f"{p + ' CPU s':>18}{p + ' wall s':>18}" for p in args.paths)
        print(f"\n{'phase':<26}{head}" + ("        CPU ratio" if len(args.paths) == 2 else ""))
        for phase in phases:
            cells = "".join(f"{clocks[p].cpu[phase]:>18.2f}{clocks[p].wall[phase]:>18.2f}" for p in args.paths)
            ratio = ""
            if len(args.paths) == 2 and clocks[args.paths[1]].cpu[phase] > 0:
                ratio = f"{clocks[args.paths[0]].cpu[phase] / clocks[args.paths[1]].cpu[phase]:>16.2f}x"
            print(f"{phase:<26}{cells}{ratio}")
        if len(args.paths) == 2:
            a, b = args.paths
            print(f"\nspeed-up {a} -> {b}: {clocks[a].cpu['total'] / clocks[b].cpu['total']:.2f}x CPU, "
                  f"{clocks[a].wall['total'] / clocks[b].wall['total']:.2f}x wall")
            same_store = same_samples(root / a, root / b)
            same_result = json.dumps(decisions(results[a]), sort_keys=True) == json.dumps(
                decisions(results[b]), sort_keys=True)
            print(f"identical stored samples: {same_store}; identical verdicts and figures: {same_result}")
            verdicts = {c["case_id"]: c["verdict"] for c in results[b]["cases"]}
            print(f"verdicts ({b}): {verdicts}")
            if not (same_store and same_result):
                raise SystemExit("the paths disagree")
    finally:
        if args.keep or args.out:
            print(f"outputs kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
