"""Pipeline A/A with a slightly wrong oracle: the false-`shifted` rate of whole runs (issue #22's table).

Both engines are correct -- they sample the same law -- and share the same small error with the
oracle (:func:`speceq.stats.synthetic.mismatch_world`): a nucleus-boundary token of probability
1.2e-4 the oracle's processed law excludes, or a temperature 1.03 / 1.04 against a T = 1
oracle. Each run is one case (prompt 0 with companions 1 and 2, 4 new tokens, EOS-prone),
``--samples`` rows per engine, the real fixed-size analysis and decision
(:func:`speceq.pipeline.analysis.analyse_run`) or the real sequential run
(:func:`speceq.pipeline.runner.run` with ``sequential=True``, the world's oracle put in place of
the transformers oracle), alpha 1e-3, tolerance 0.15. A run is a false alarm when its verdict
is ``shifted``; the rate is compared with alpha's one-sided 3-sigma band.

``--power``: the same runs with a candidate that samples the oracle's law while the baseline
samples the engines' (a candidate-only change of the size of the shared error), to show the
comparisons still see a shift that only one engine has.

Usage::

    python benchmarks/mismatch_aa.py --runs 3000                     # fixed-size, every world
    python benchmarks/mismatch_aa.py --mode sequential --runs 300 --worlds "boundary token"
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as sps

from speceq.core.defaults import SUPPORT_MARGIN_NATS  # the margin of speceq run on the bundled byte models
from speceq.core.params import SamplingParams
from speceq.engines.base import SampleBatch, SampleRequest
from speceq.inputs.cases import Case
from speceq.stats.synthetic import MISMATCH_WORLDS, MismatchWorld, mismatch_world

PROMPTS = ((0,), (1,), (2,))
ALPHA = 1e-3


class WorldEngine:
    """A correct engine of a mismatch world: samples ``law`` ("engine" or "oracle") of every prompt."""

    def __init__(self, world: MismatchWorld, law: str = "engine", name: str = "world") -> None:
        self.world, self.law, self.name = world, law, name
        self.vocab_size = world.vocab_size
        self.eos_token_id = world.eos

    def describe(self) -> dict[str, Any]:
        return {"engine": "mismatch world", "world": self.world.name, "law": self.law}

    def sample(self, request: SampleRequest) -> SampleBatch:
        rng = np.random.default_rng(request.seed)
        index = request.rows()
        L = request.params.max_new_tokens
        tokens = np.full((index.size, L), -1, dtype=np.int64)
        lengths = np.zeros(index.size, dtype=np.int64)
        for j, prompt in enumerate(request.prompts):
            rows = np.flatnonzero(index == j)
            t, n = self.world.sample(rng, rows.size, L, prompt=int(prompt[0]), law=self.law)
            tokens[rows], lengths[rows] = t, n
        return SampleBatch(tokens=tokens, lengths=lengths, prompt_index=index)


class WorldOracle:
    """The world's (slightly wrong) oracle, as a :class:`speceq.oracles.protocol.Oracle`."""

    def __init__(self, world: MismatchWorld) -> None:
        self.world = world
        self.vocab_size = world.vocab_size
        self.eos_token_id = world.eos

    @property
    def has_draft(self) -> bool:
        return True

    def knows_full_law(self, params: SamplingParams) -> bool:
        return True

    def describe(self) -> dict[str, Any]:
        return {"model": f"mismatch world oracle ({self.world.name}): {self.world.description}", "draft": "world"}

    def _law(self, prefix: Sequence[int]) -> np.ndarray:
        return self.world.initial[int(prefix[0])] if len(prefix) == 1 else self.world.transition[int(prefix[-1])]

    def next_token_probs(self, prefixes: Sequence[Sequence[int]], params: SamplingParams) -> np.ndarray:
        return np.stack([self._law(p) for p in prefixes])

    def raw_top2_margin(self, prefixes: Sequence[Sequence[int]]) -> np.ndarray:
        top = np.sort(self.next_token_probs(prefixes, SamplingParams()), axis=1)[:, -2:]
        return np.log(top[:, 1]) - np.log(top[:, 0])

    def score(self, prompts: Sequence[Sequence[int]], batch: SampleBatch, params: SamplingParams) -> Any:
        world_prompt = np.array([int(prompts[j][0]) for j in np.asarray(batch.prompt_index)], dtype=np.int64)
        return self.world.score(batch.tokens, batch.lengths, prompts=world_prompt)


def world_case(max_new_tokens: int = 4) -> Case:
    return Case(case_id="world", prompt_ids=PROMPTS[0], companions=PROMPTS[1:],
                params=SamplingParams(max_new_tokens=max_new_tokens))


def _deciding(result: Any) -> str:
    c = result.cases[0]
    if c.hard_failures:
        return "hard failure: " + c.hard_failures[0][:60]
    tests = [t for t in c.tests if t.primary and t.adjusted_pvalue is not None]
    return min(tests, key=lambda t: t.adjusted_pvalue).name if tests else "?"


def _every_tenth(runs: int, r: int, shifted: int, progress: Callable[[str], None] | None, label: str) -> None:
    """Report progress after every tenth of the runs (long sweeps run for an hour or more)."""
    if progress is not None and (r + 1) % max(1, runs // 10) == 0:
        progress(f"{label}: {r + 1}/{runs} runs, {shifted} shifted")


def fixed_runs(world: MismatchWorld, runs: int, samples: int, seed: int, power: bool,
               progress: Callable[[str], None] | None = None) -> tuple[int, Counter]:
    """False (or, with power, true) `shifted` runs of the fixed-size analysis, and what decided them."""
    from speceq.pipeline.analysis import analyse_run

    case = world_case()
    oracle = WorldOracle(world)
    base_engine = WorldEngine(world)
    cand_engine = WorldEngine(world, law="oracle" if power else "engine")
    shifted, why = 0, Counter()
    for r in range(runs):
        req = lambda s: SampleRequest(prompts=case.prompts, params=case.params, n=samples, seed=s)  # noqa: E731
        base = base_engine.sample(req(seed * 1_000_003 + 2 * r))
        cand = cand_engine.sample(req(seed * 1_000_003 + 2 * r + 1))
        res = analyse_run([case], {case.case_id: base}, {case.case_id: cand}, oracle=oracle, alpha=ALPHA,
                          tolerance=0.15, seed=r, engines={"baseline": {}, "candidate": {}}, provenance={},
                          support_margin_nats=SUPPORT_MARGIN_NATS)
        if res.verdict == "shifted":
            shifted += 1
            why[_deciding(res)] += 1
        _every_tenth(runs, r, shifted, progress, f"{world.name}, fixed-size")
    return shifted, why


def sequential_runs(world: MismatchWorld, runs: int, samples: int, seed: int, power: bool,
                    progress: Callable[[str], None] | None = None) -> tuple[int, Counter]:
    """False (or true) `shifted` runs of the real sequential run, the world's oracle in place of the model's."""
    from speceq.pipeline import runner
    from speceq.pipeline.config import RunConfig

    oracle = WorldOracle(world)
    saved = runner.make_oracle, runner.check_oracle_matches, runner.oracle_sources
    runner.make_oracle = lambda spec, engines: oracle
    runner.check_oracle_matches = lambda o, engines: None
    runner.oracle_sources = lambda spec, engines: (None, None)
    shifted, why = 0, Counter()
    try:
        for r in range(runs):
            with tempfile.TemporaryDirectory() as out:
                engines = {"baseline": WorldEngine(world), "candidate": WorldEngine(world, law="oracle" if power else "engine")}
                config = RunConfig(baseline="world", candidate="world", samples=samples, seed=seed * 100_003 + r,
                                   out_dir=Path(out), progress=False, tolerance=0.15, alpha=ALPHA, sequential=True,
                                   support_margin_nats=SUPPORT_MARGIN_NATS)
                res = runner.run(config, [world_case()], engines=engines)
            if res.verdict == "shifted":
                shifted += 1
                why[_deciding(res)] += 1
            _every_tenth(runs, r, shifted, progress, f"{world.name}, sequential")
    finally:
        runner.make_oracle, runner.check_oracle_matches, runner.oracle_sources = saved
    return shifted, why


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("fixed", "sequential"), default="fixed")
    ap.add_argument("--runs", type=int, default=3000)
    ap.add_argument("--samples", type=int, default=3000, help="rows per engine and prompt")
    ap.add_argument("--worlds", default=",".join(MISMATCH_WORLDS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--power", action="store_true", help="a candidate-only change instead of an A/A")
    args = ap.parse_args(argv)
    t0 = time.time()
    print(f"| world | mode | runs | {'true' if args.power else 'false'} `shifted` | rate | 3-sigma band at alpha "
          f"{ALPHA:g} | P(X >= k) | decided by |")
    print("|---|---|---|---|---|---|---|---|")
    for name in [w.strip() for w in args.worlds.split(",") if w.strip()]:
        world = mismatch_world(name)
        fn = fixed_runs if args.mode == "fixed" else sequential_runs
        k, why = fn(world, args.runs, args.samples, args.seed, args.power,
                    progress=lambda msg: print(f"[{time.time() - t0:6.0f} s] {msg}", file=sys.stderr, flush=True))
        band = ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / args.runs)
        tail = float(sps.binom.sf(k - 1, args.runs, ALPHA)) if k else 1.0
        decided = "; ".join(f"{n}: {c}" for n, c in why.most_common(4)) or "—"
        print(f"| {name} | {args.mode} | {args.runs} | {k} | {k / args.runs:.4f} | {band:.4f} | {tail:.2f} | {decided} |",
              flush=True)
        print(f"[{time.time() - t0:6.0f} s] {name} done", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
