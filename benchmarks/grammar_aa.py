"""False alarms of the grammar-masked oracle path: A/A runs of a structured_outputs case.

Baseline and candidate are both the built-in baseline engine (independent seeds), so both draw from
the same grammar-masked law; each run is analysed by :func:`speceq.pipeline.analysis.analyse_run`
with the transformers oracle (every token scored with the grammar mask after its own row's earlier
tokens, the grammar hard failure, every primary test, Holm, the decision). Prints, per run, the
verdict at ``--alpha`` and the smallest Holm-adjusted p-value of the primary tests, then the number
of runs a decision at 0.05, 0.01 and 0.001 would call ``shifted`` (the same analysis; its Monte
Carlo p-values are sized to ``--alpha``), and the runs with a grammar hard failure (must be 0).

Usage: python benchmarks/grammar_aa.py [--runs 100] [--samples 200] [--tokens 8] [--seed 0] [--cases regex choice]
"""

from __future__ import annotations

import argparse
import time

import torch

from speceq.core.params import SamplingParams
from speceq.engines.base import SampleRequest
from speceq.engines.baseline import BaselineEngine
from speceq.inputs.cases import Case
from speceq.models import ByteTokenizer, load_target
from speceq.models.prompts import DEFAULT_PROMPTS
from speceq.oracles.hf import TargetOracle
from speceq.pipeline.analysis import analyse_run

#: The cases: the grammar mutant's gallery grammar, and a regex with a free length.
GRAMMARS = {
    "choice": {"choice": ["main():", "test_all():", "run(x):"]},
    "regex": {"regex": "[a-z_]{1,6}\\((self)?\\):"},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--alpha", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cases", nargs="+", choices=sorted(GRAMMARS), default=["regex"])
    args = ap.parse_args()
    torch.set_num_threads(1)
    target = load_target()
    engine = BaselineEngine(target)
    oracle = TargetOracle(target)
    prompt = tuple(ByteTokenizer().encode(DEFAULT_PROMPTS[0]))
    cases = [Case(case_id=name, prompt_ids=prompt, batch_size=64,
                  params=SamplingParams(max_new_tokens=args.tokens, tokenizer="bytes", structured_outputs=g))
             for name, g in GRAMMARS.items() if name in args.cases]
    levels = (0.05, 0.01, 0.001)
    false = dict.fromkeys(levels, 0)
    hard = 0
    t0 = time.perf_counter()
    for run in range(args.runs):
        base, cand = {}, {}
        for i, case in enumerate(cases):
            for j, out in enumerate((base, cand)):
                seed = args.seed * 1_000_003 + run * 4 + i * 2 + j
                out[case.case_id] = engine.sample(SampleRequest(prompts=(prompt,), params=case.params, n=args.samples,
                                                                seed=seed, batch_size=64))
        result = analyse_run(cases, base, cand, oracle=oracle, alpha=args.alpha, tolerance=0.05, seed=run,
                             engines={"baseline": {}, "candidate": {}}, provenance={})
        ps = [t.adjusted_pvalue for c in result.cases for t in c.tests if t.primary and t.adjusted_pvalue is not None]
        low = min(ps, default=1.0)
        hard += any(c.hard_failures for c in result.cases)
        for a in levels:
            false[a] += low <= a
        print(f"run {run}: verdict {result.verdict} min Holm p {low:.3g} "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
    for a in levels:
        print(f"alpha {a:g}: {false[a]} of {args.runs} runs would be shifted (rate {false[a] / args.runs:.3f})")
    print(f"runs with a grammar hard failure: {hard}")


if __name__ == "__main__":
    main()
