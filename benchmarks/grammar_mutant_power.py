"""Samples to detect the grammar mutant: verdicts of its gallery case against the reference engine's.

The mutant ``grammar-not-advanced-over-drafts`` advances each row's grammar state over the verifier's
drawn token only, not over the drafts it accepted. For each seed and sample size this samples the
gallery case (bundled byte models, prompt ``def ``, the mutant's ``params`` and ``options``, 8 tokens,
batch 64) with the baseline (seed 101), the mutant and the reference engine, analyses each pair with
:func:`speceq.pipeline.analysis.analyse_run` and the transformers oracle (with the draft), and prints the
verdict and the first hard failure (rows leaving the grammar).

Usage: python benchmarks/grammar_mutant_power.py [--samples 1 2 5 10 25 50 100 200] [--seeds 202 303]
"""

from __future__ import annotations

import argparse
import time

import torch

from speceq.core.params import SamplingParams
from speceq.engines.base import SampleRequest
from speceq.engines.baseline import BaselineEngine
from speceq.engines.mutants import MUTANTS, make_mutant
from speceq.engines.reference import ReferenceSpeculativeEngine
from speceq.inputs.cases import Case
from speceq.models import ByteTokenizer, load_draft, load_target
from speceq.models.prompts import DEFAULT_PROMPTS
from speceq.oracles.hf import TargetOracle
from speceq.pipeline.analysis import analyse_run

NAME = "grammar-not-advanced-over-drafts"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, nargs="+", default=[1, 2, 5, 10, 25, 50, 100, 200])
    ap.add_argument("--seeds", type=int, nargs="+", default=[202, 303])
    ap.add_argument("--tokens", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(1)
    spec = MUTANTS[NAME]
    target, draft = load_target(), load_draft()
    prompt = tuple(ByteTokenizer().encode(DEFAULT_PROMPTS[0]))
    case = Case(case_id=NAME, prompt_ids=prompt, batch_size=64,
                params=SamplingParams(max_new_tokens=args.tokens, **spec.params))
    oracle = TargetOracle(target, draft=draft)
    for seed in args.seeds:
        for n in args.samples:
            base = BaselineEngine(target).sample(SampleRequest(prompts=(prompt,), params=case.params, n=n, seed=101,
                                                               batch_size=64))
            for which in ("mutant", "reference"):
                t0 = time.perf_counter()
                engine = (make_mutant(NAME, target=target, draft=draft, **spec.options) if which == "mutant"
                          else ReferenceSpeculativeEngine(target, draft, **spec.options))
                cand = engine.sample(SampleRequest(prompts=(prompt,), params=case.params, n=n, seed=seed, batch_size=64))
                result = analyse_run([case], {NAME: base}, {NAME: cand}, oracle=oracle, alpha=1e-3, tolerance=0.05,
                                     seed=0, engines={"baseline": {}, "candidate": engine.describe()}, provenance={})
                c = result.cases[0]
                first = c.hard_failures[0][:150] if c.hard_failures else "-"
                print(f"seed {seed} n {n} {which}: {c.verdict}; {first} ({time.perf_counter() - t0:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
