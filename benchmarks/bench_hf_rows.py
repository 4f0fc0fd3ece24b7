"""Seconds per row of the one-row-at-a-time ``hf-*`` engines on SmolLM2, with and without remembered forwards.

transformers runs its speculative paths one row per ``generate()`` call. Every row used to
recompute the prompt's prefill and every decoding step, even where an earlier row of the same
case had made the same forward after the same tokens. ``speceq.engines._prefill`` remembers
those forwards across rows (``SPECEQ_HF_PREFILL_MEMO=0`` turns it off). In one process, this
script builds each engine twice, with the memo off ("before") and on ("after"), samples the
same request (batch 1, one SmolLM2 chat case) with each, and prints CPU and wall seconds per
row, their ratios, whether the two sampled identical rows (exit status 1 if not), and whether the
ratio meets issue 47's goal of at least 2x fewer CPU seconds per row (printed, not an exit status).
CPU time (``time.process_time``, 1 torch thread) is what is compared: a shared machine
disturbs wall time far more. ``--breakdown`` then samples the request once more with the memo on
and splits its CPU time into the target's forwards, the draft's forwards (both as computed, the
remembered ones excluded), the memo's own bookkeeping, the token draws (``torch.multinomial``) and
everything else (``generate()``'s own Python, the logits processors, the speculative acceptance step).

Needs ``speceq smollm2 prepare``. Usage::

    python benchmarks/bench_hf_rows.py                       # the four engines, 24 rows, 2 and 6 tokens
    python benchmarks/bench_hf_rows.py --rows 50 --tokens 6 --engines hf-assisted
    python benchmarks/bench_hf_rows.py --tokens 6 --engines hf-assisted --breakdown   # where a row's time goes
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

#: The engines that remember forwards across rows (``_remember_forwards``), in table order.
ENGINES = ("hf-sample", "hf-prompt-lookup", "hf-assisted", "hf-early-exit")
#: Issue 47's goal: CPU seconds per row at least this many times fewer with the memo than without.
GOAL = 2.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=24, help="rows per engine and setting (default 24)")
    parser.add_argument("--tokens", type=int, nargs="+", default=[2, 6], help="max_new_tokens values (default 2 6)")
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=list(ENGINES),
                        help="default: all four remembering engines")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--breakdown", action="store_true",
                        help="also split the remembering engine's CPU time: forwards of target and draft, memo, rest")
    args = parser.parse_args(argv)

    import torch

    from speceq.core.params import SamplingParams
    from speceq.engines._prefill import ENV_SWITCH
    from speceq.engines.base import SampleRequest
    from speceq.engines.hf import HFAssistedEngine, HFPromptLookupEngine, HFSampleEngine
    from speceq.engines.hf_paths import HFEarlyExitEngine
    from speceq.inputs.cases import smollm2_cases
    from speceq.models.smollm2 import prepared

    torch.set_num_threads(1)
    world = prepared()
    case = next(c for c in smollm2_cases() if c.case_id == "smol-repeat-t1-b1")
    makers = {"hf-sample": lambda: HFSampleEngine(str(world.target)),
              "hf-prompt-lookup": lambda: HFPromptLookupEngine(str(world.target)),
              "hf-assisted": lambda: HFAssistedEngine(str(world.target), str(world.draft)),
              "hf-early-exit": lambda: HFEarlyExitEngine(str(world.target))}
    print(f"case {case.case_id} (prompt {len(case.prompt_ids)} tokens, T = 1.0, batch 1), {args.rows} rows, "
          f"seed {args.seed}, 1 torch thread; load average {os.getloadavg()[0]:.2f}")
    print(f"{'engine':<12} {'tokens':>6} {'before s/row (CPU)':>19} {'after s/row (CPU)':>18} {'ratio CPU':>9} "
          f"{'ratio wall':>10} {'mean len':>8} identical  goal {GOAL:g}x (CPU)")
    ok = True
    for name in args.engines:
        for tokens in args.tokens:
            params = SamplingParams(temperature=1.0, max_new_tokens=tokens)
            request = SampleRequest(prompts=(case.prompt_ids,), params=params, n=args.rows, seed=args.seed, batch_size=1)
            got = {}
            for setting, value in (("before", "0"), ("after", "1")):
                os.environ[ENV_SWITCH] = value
                engine = makers[name]()
                wall0, cpu0 = time.perf_counter(), time.process_time()
                batch = engine.sample(request)
                got[setting] = (time.process_time() - cpu0, time.perf_counter() - wall0, batch)
                del engine
            (cpu_b, wall_b, before), (cpu_a, wall_a, after) = got["before"], got["after"]
            same = (np.array_equal(before.tokens, after.tokens) and np.array_equal(before.lengths, after.lengths)
                    and before.accepted_tokens == after.accepted_tokens)
            ok &= same
            print(f"{name:<12} {tokens:>6} {cpu_b / args.rows:>19.3f} {cpu_a / args.rows:>18.3f} {cpu_b / cpu_a:>8.2f}x "
                  f"{wall_b / wall_a:>9.2f}x {before.lengths.mean():>8.2f} {str(same):<9}  "
                  f"{'met' if cpu_b >= GOAL * cpu_a else 'not met'}", flush=True)
    if args.breakdown:
        for name in args.engines:
            for tokens in args.tokens:
                params = SamplingParams(temperature=1.0, max_new_tokens=tokens)
                request = SampleRequest(prompts=(case.prompt_ids,), params=params, n=args.rows, seed=args.seed,
                                        batch_size=1)
                print(measure_breakdown(makers[name], request).line(name, tokens), flush=True)
    os.environ.pop(ENV_SWITCH, None)
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    return 0 if ok else 1


def _timer(inner: Any, seconds: dict[str, float], calls: dict[str, int], label: str) -> Any:
    """``inner`` wrapped so that its CPU seconds and calls add up under ``label`` (same signature)."""

    @functools.wraps(inner)
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.process_time()
        try:
            return inner(*args, **kwargs)
        finally:
            seconds[label] = seconds.get(label, 0.0) + time.process_time() - started
            calls[label] = calls.get(label, 0) + 1

    return timed


def _timed(model: Any, seconds: dict[str, float], calls: dict[str, int], label: str) -> None:
    """Time ``model.forward`` (on the instance) under ``label``."""
    model.forward = _timer(model.forward, seconds, calls, label)


@dataclass(frozen=True)
class Breakdown:
    """Where one ``sample()`` call of a remembering engine spent its CPU seconds (``time.process_time``).

    ``forward_s``: per model (``target``, ``draft``), the seconds of the forwards it computed;
    ``computed`` / ``asked``: how many forwards it computed / was asked for (the rest the memo
    answered); ``memo_s``: the memo's own seconds around them; ``draws_s`` / ``draws``: the seconds and
    calls of ``torch.multinomial``; ``rest_s``: everything else in the call.
    """

    rows: int
    total_s: float
    forward_s: dict[str, float]
    computed: dict[str, int]
    asked: dict[str, int]
    memo_s: float
    draws_s: float
    draws: int

    @property
    def rest_s(self) -> float:
        return self.total_s - sum(self.forward_s.values()) - self.memo_s - self.draws_s

    def line(self, name: str, tokens: int) -> str:
        """One printed line: CPU seconds per row and each part's share of the call, in %."""
        def pct(seconds: float) -> str:
            return f"{100 * seconds / self.total_s:.1f}%"

        parts = [f"{label} forwards {pct(s)} ({self.computed[label]} of {self.asked[label]} computed)"
                 for label, s in self.forward_s.items()]
        return (f"breakdown {name} {tokens} tokens, {self.total_s / self.rows:.3f} CPU s/row: {', '.join(parts)}, "
                f"memo bookkeeping {pct(self.memo_s)}, torch.multinomial {pct(self.draws_s)} ({self.draws} draws), "
                f"the rest (generate()'s own Python, processors, acceptance) {pct(self.rest_s)}")


def measure_breakdown(make: Any, request: Any) -> Breakdown:
    """Build an engine with ``make()`` and sample ``request`` with the memo on, timing its parts (see Breakdown).

    The engine is built with the memo off, then each model's forward gets a timer, the memo, and a
    second timer around the memo: the inner timer sees the forwards computed, the outer one every
    forward asked for. ``torch.multinomial`` is timed the same way for the call's duration.
    """
    import torch

    from speceq.engines._prefill import ENV_SWITCH, remember_prefills

    before = os.environ.get(ENV_SWITCH)
    os.environ[ENV_SWITCH] = "0"
    try:
        engine = make()
        os.environ[ENV_SWITCH] = "1"
        seconds: dict[str, float] = {}
        calls: dict[str, int] = {}
        models = {"target": engine.target, **({"draft": engine.draft} if hasattr(engine, "draft") else {})}
        for label, model in models.items():
            _timed(model, seconds, calls, f"{label} computed")
            if remember_prefills(model) is None:
                raise RuntimeError(f"{label}: the memo did not wrap the model")
            _timed(model, seconds, calls, f"{label} asked")
        multinomial = torch.multinomial  # transformers draws every token with it
        torch.multinomial = _timer(multinomial, seconds, calls, "draws")
        try:
            started = time.process_time()
            engine.sample(request)
            total = time.process_time() - started
        finally:
            torch.multinomial = multinomial
    finally:
        if before is None:
            os.environ.pop(ENV_SWITCH, None)
        else:
            os.environ[ENV_SWITCH] = before
    forward_s = {label: seconds.get(f"{label} computed", 0.0) for label in models}
    asked_s = sum(seconds.get(f"{label} asked", 0.0) for label in models)
    return Breakdown(rows=int(request.n), total_s=total, forward_s=forward_s,
                     computed={label: calls.get(f"{label} computed", 0) for label in models},
                     asked={label: calls.get(f"{label} asked", 0) for label in models},
                     memo_s=asked_s - sum(forward_s.values()), draws_s=seconds.get("draws", 0.0),
                     draws=calls.get("draws", 0))


if __name__ == "__main__":
    sys.exit(main())
