"""Samples-to-detect of mutant:shared-uniforms by the row-independence test, on the bundled models.

The mutant's rows of one batch share their first verify step's uniforms (each row's law exact). For
each sample count n, ``--seeds`` runs sample n rows of the default prompt (batch size 8, calls of
``--call`` rows, 4 tokens, T = 1) and test them with speceq.stats.row_independence, grouped as a run
groups them (speceq.pipeline.analysis.row_groups: calls, or the batches of one call); printed: the share of runs whose p-value is at most ``--level`` (default 1e-4, about
the first Holm step of a one-prompt oracle case at alpha = 1e-3) and the median p-value.

    python benchmarks/independence_power.py --seeds 10 --call 16
    python benchmarks/independence_power.py --seeds 10 --call 500   # speceq run's default chunk size
"""

from __future__ import annotations

import argparse

import numpy as np

from speceq.core.params import SamplingParams
from speceq.engines.base import SampleRequest
from speceq.engines.mutants import make_mutant
from speceq.models import ByteTokenizer, load_draft, load_target
from speceq.models.prompts import DEFAULT_PROMPTS
from speceq.pipeline.analysis import row_groups
from speceq.pipeline.plan import concat_batches
from speceq.stats import row_independence


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 32, 48, 64, 128])
    parser.add_argument("--call", type=int, default=16, help="rows per sample() call (speceq run: --chunk-size)")
    parser.add_argument("--level", type=float, default=1e-4)
    args = parser.parse_args()
    engine = make_mutant("shared-uniforms", target=load_target(), draft=load_draft())
    prompt = tuple(ByteTokenizer().encode(DEFAULT_PROMPTS[0]))
    params = SamplingParams(max_new_tokens=4)
    print(f"| samples | runs | detected at p <= {args.level:g} | median p |")
    print("|---|---|---|---|")
    for n in args.sizes:
        p = []
        for seed in range(args.seeds):
            calls = [engine.sample(SampleRequest(prompts=(prompt,), params=params, n=min(args.call, n - lo),
                                                 seed=1000 * seed + lo, batch_size=8))
                     for lo in range(0, n, args.call)]
            batch = concat_batches(calls)
            groups = row_groups(batch, 8)
            p.append(row_independence(batch.tokens, batch.lengths, groups, batch.prompt_index).pvalue)
        p = np.array(p)
        print(f"| {n} | {args.seeds} | {(p <= args.level).mean():.0%} | {np.median(p):.2g} |")


if __name__ == "__main__":
    main()
