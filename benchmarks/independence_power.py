"""Samples-to-detect of mutant:shared-uniforms by the row-independence test, on the bundled models.

The mutant's rows of one batch share their first verify step's uniforms (each row's law exact). For
each sample count n, ``--seeds`` runs sample n rows of the default prompt (batch size 8, calls of
``--call`` rows, 4 tokens, T = 1) and test them with speceq.stats.row_independence, grouped as a run
groups them (speceq.pipeline.analysis.row_groups: calls, or the batches of one call); printed: the share of runs whose p-value is at most ``--level`` (default 1e-4, about
the first Holm step of a one-prompt oracle case at alpha = 1e-3) and the median p-value.

    python benchmarks/independence_power.py --seeds 10 --call 16
    python benchmarks/independence_power.py --seeds 10 --call 500   # speceq run's default chunk size
    python benchmarks/independence_power.py --verdicts 10 --samples 300   # whole runs: verdicts and reasons
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
    parser.add_argument("--verdicts", type=int, default=0,
                        help="instead: this many seeded speceq runs (baseline vs the mutant), verdicts and reasons")
    parser.add_argument("--samples", type=int, default=300, help="samples per engine of each --verdicts run")
    args = parser.parse_args()
    if args.verdicts:
        verdicts(args.verdicts, args.samples)
        return
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


def verdicts(runs: int, samples: int) -> None:
    """Seeded whole runs (speceq.run, default chunk size, default oracle): how each is decided."""
    import collections
    import tempfile

    from speceq.engines.baseline import BaselineEngine
    from speceq.inputs.cases import Case
    from speceq.pipeline.config import RunConfig
    from speceq.pipeline.runner import run

    target, draft = load_target(), load_draft()
    case = Case(case_id="shared", prompt_ids=tuple(ByteTokenizer().encode(DEFAULT_PROMPTS[0])),
                params=SamplingParams(max_new_tokens=4), batch_size=8)
    engines = {"baseline": BaselineEngine(target),
               "candidate": make_mutant("shared-uniforms", target=target, draft=draft)}
    seen: collections.Counter[str] = collections.Counter()
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(runs):
            config = RunConfig(candidate="mutant:shared-uniforms", samples=samples, seed=seed, out_dir=f"{tmp}/{seed}",
                               progress=False)
            c = run(config, [case], engines=engines).cases[0]
            seen[f"{c.verdict}: {c.reason.split(':')[0]}"] += 1
    for what, count in seen.most_common():
        print(f"{count} of {runs} runs at {samples} samples per engine: {what}")


if __name__ == "__main__":
    main()
