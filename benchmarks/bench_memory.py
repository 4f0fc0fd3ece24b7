"""Peak memory while collecting and analysing a million samples (goal: < 2 GB).

A fast numpy engine (no model: this measures the collector, the store and the two-sample
analysis, not a model's weights) streams ``--samples`` samples per engine of one case in
chunks through ``speceq.pipeline.runner.run`` (oracle off), then the store is read back into pandas.
Prints wall time, peak RSS (resource.getrusage, MB) and the store size.

    python benchmarks/bench_memory.py --samples 1000000 --chunk-size 50000
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from speceq.core.params import SamplingParams
from speceq.engines.base import SampleBatch, SampleRequest
from speceq.inputs.cases import Case
from speceq.pipeline.config import RunConfig
from speceq.pipeline.runner import run
from speceq.store import load_samples_frame


class NumpyEngine:
    """I.i.d. tokens from a fixed 20-token law; EOS never drawn (ignore_eos cases)."""

    name = "numpy"
    vocab_size = 259
    eos_token_id = 257

    def describe(self) -> dict:
        return {"engine": "numpy i.i.d."}

    def sample(self, request: SampleRequest) -> SampleBatch:
        rng = np.random.default_rng(request.seed)
        rows = request.n * len(request.prompts)
        p = np.linspace(1.0, 2.0, 20)
        tokens = 97 + rng.choice(20, size=(rows, request.params.max_new_tokens), p=p / p.sum())
        return SampleBatch(tokens=tokens.astype(np.int64), lengths=np.full(rows, request.params.max_new_tokens),
                           prompt_index=request.rows(), wall_time_s=0.0)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: kB


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--chunk-size", type=int, default=50_000)
    ap.add_argument("--tokens", type=int, default=8)
    args = ap.parse_args(argv)
    out = Path(tempfile.mkdtemp(prefix="speceq-mem-"))
    try:
        case = Case(case_id="mem", prompt_ids=(256, 97), params=SamplingParams(max_new_tokens=args.tokens, ignore_eos=True))
        config = RunConfig(samples=args.samples, chunk_size=args.chunk_size, out_dir=out, oracle=False, progress=False)
        t0 = time.perf_counter()
        result = run(config, [case], engines={"baseline": NumpyEngine(), "candidate": NumpyEngine()})
        t_run = time.perf_counter() - t0
        rss_run = peak_rss_mb()
        t0 = time.perf_counter()
        frame = load_samples_frame(out)
        t_frame = time.perf_counter() - t0
        size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) / 1e6
        print(f"samples per engine        {args.samples:>12,}  ({args.tokens} tokens each, chunks of {args.chunk_size:,})")
        print(f"run (collect + analyse)   {t_run:>12.1f} s   verdict {result.verdict}")
        print(f"peak RSS after the run    {rss_run:>12.0f} MB")
        print(f"pandas frame              {t_frame:>12.1f} s   {len(frame):,} rows")
        print(f"peak RSS after the frame  {peak_rss_mb():>12.0f} MB   (goal for the run: < 2048 MB)")
        print(f"store on disk             {size:>12.1f} MB")
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
