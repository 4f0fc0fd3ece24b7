"""Verdicts of the BPE world: baseline vs reference and a few mutants on the ``bpe`` cases.

The same as ``speceq run --models bpe --candidate C --samples N`` for each candidate C, with
the baseline's chunks copied into every candidate's store so the baseline is sampled once. Prints a markdown
table of verdicts with each case's TV estimate (docs/explanation/bpe-world.md) and writes JSON. Black-box or
oracle on; the calibrated power table of this world is ``benchmarks/bpe_power.py``, and exact
TVs (``speceq.power.exact.exact_tv``, bounded memory at V = 32 000) are measured by
``benchmarks/bench_vocab.py exact``.

    python benchmarks/bpe_world.py --samples 1000 --out /tmp/bpe-world
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

DEFAULT_CANDIDATES = (
    "reference",
    "mutant:draft-untruncated",
    "mutant:resample-from-target",
    "mutant:target-no-temperature",
    "mutant:top-k-draft-only",
    "mutant:greedy-acceptance",
)


def main(argv: list[str] | None = None) -> int:
    import torch

    from speceq.engines.registry import resolve_engine
    from speceq.inputs.cases import bpe_cases
    from speceq.models.worlds import world_engine_options
    from speceq.pipeline.config import RunConfig
    from speceq.pipeline.runner import run

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--candidates", default=",".join(DEFAULT_CANDIDATES))
    ap.add_argument("--cases", default="", help="comma-separated case ids (default: all bpe cases)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("bpe-world-out"))
    ap.add_argument("--no-oracle", dest="oracle", action="store_false", help="black-box tests only")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    cases = bpe_cases()
    if args.cases:
        wanted = args.cases.split(",")
        cases = [c for c in cases if c.case_id in wanted]
    baseline = resolve_engine("baseline", options=world_engine_options("bpe", "baseline", {}))
    rows: list[dict] = []
    for spec in args.candidates.split(","):
        options = world_engine_options("bpe", spec, {})
        candidate = resolve_engine(spec, options=options)
        store = args.out / spec.replace(":", "-")
        shared = args.out / "baseline-chunks"
        if shared.is_dir() and not (store / "chunks" / "baseline").exists():  # reuse the baseline's samples
            shutil.copytree(shared, store / "chunks" / "baseline")
        config = RunConfig(candidate=spec, candidate_options=options, samples=args.samples,
                           chunk_size=args.samples, seed=args.seed, out_dir=store, progress=False,
                           oracle=args.oracle)
        t0 = time.perf_counter()
        result = run(config, cases, engines={"baseline": baseline, "candidate": candidate})
        seconds = time.perf_counter() - t0
        if not shared.is_dir():
            shutil.copytree(store / "chunks" / "baseline", shared)
        row = {"candidate": spec, "samples": args.samples, "seconds": round(seconds, 1), "run_verdict": result.verdict,
               "cases": {c.case_id: {"verdict": c.verdict, "tv_estimate": c.tv_estimate,
                                     "tv_upper_bound": c.tv_upper_bound, "acceptance": c.acceptance_rate}
                         for c in result.cases}}
        rows.append(row)
        print(json.dumps(row), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bpe-world.json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    ids = [c.case_id for c in cases]
    print("\n| candidate | " + " | ".join(f"`{i}`" for i in ids) + " | run | time |")
    print("|---|" + "---|" * (len(ids) + 2))
    for r in rows:
        cells = []
        for i in ids:
            c = r["cases"][i]
            tv = "" if c["tv_estimate"] is None else f" ({c['tv_estimate']:.2f})"
            cells.append(f"{c['verdict']}{tv}")
        print(f"| `{r['candidate']}` | " + " | ".join(cells) + f" | {r['run_verdict']} | {r['seconds']:.0f} s |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
