"""Tokens per second of the reference speculative engine vs the baseline, with Leviathan's model.

For each batch size and k: tokens/s of ReferenceSpeculativeEngine and BaselineEngine on the
bundled target/draft and the default prompts (``ignore_eos``, so every row has
``--new-tokens`` tokens), the measured per-token acceptance probability a (accepted /
accept tests decided: Leviathan's alpha; accepted / drafted is printed too), the cost
ratio c (one draft decode forward / one target decode forward, timed at that batch size
on a cache of prompt length), and Leviathan et al.'s predicted speed-up
(1 - a^(k+1)) / ((1 - a)(k c + 1)) next to the measured one. That model prices a verify
pass of k+1 tokens like one decode step; v (measured) is the true price of the verify pass
in decode steps, and the refined prediction uses (k c + v). Rates come from CPU time
(``time.process_time``, 1 thread); shared machines disturb wall time far more.

Usage: python benchmarks/bench_reference.py [--batch 1 8] [--k 2 4] [--rows 64]
       [--new-tokens 32] [--temperature 1.0] [--threads 1]
"""

from __future__ import annotations

import argparse
import time

import torch

from speceq.core.params import SamplingParams
from speceq.engines._kv import SlotCache
from speceq.engines.base import SampleRequest
from speceq.engines.baseline import BaselineEngine
from speceq.engines.reference import ReferenceSpeculativeEngine
from speceq.models import ByteTokenizer
from speceq.models.prompts import DEFAULT_PROMPTS
from speceq.models.torch_utils import configure_threads


def cpu_seconds(fn) -> tuple[float, object]:
    start = time.process_time()
    out = fn()
    return time.process_time() - start, out


def decode_forward_seconds(model, batch: int, context: int, width: int = 1, steps: int = 30) -> float:
    """CPU seconds of one forward of ``width`` new tokens at ``batch`` rows on a ``context``-token cache."""
    ids = torch.randint(0, 256, (batch, context))
    new = torch.randint(0, 256, (batch, width))
    total = 0.0
    with torch.inference_mode():
        for step in range(steps + 1):
            slots = SlotCache(model, batch, "cpu")
            slots.forward(ids, torch.ones_like(ids, dtype=torch.bool))
            start = time.process_time()
            slots.forward(new, torch.ones_like(new, dtype=torch.bool))
            total += (time.process_time() - start) if step else 0.0  # step 0 warms up
    return total / steps


def leviathan_speedup(a: float, k: int, c: float, verify: float = 1.0) -> float:
    """Expected speed-up: (1 - a^(k+1)) / ((1 - a)(k c + verify)); Leviathan et al. take verify = 1."""
    tokens_per_step = (k + 1) if a >= 1.0 else (1 - a ** (k + 1)) / (1 - a)
    return tokens_per_step / (k * c + verify)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8], help="batch sizes. Default: %(default)s")
    ap.add_argument("--k", type=int, nargs="+", default=[2, 4], help="draft tokens per step. Default: %(default)s")
    ap.add_argument("--rows", type=int, default=64, help="sequences per timing (batch 1: 1/4). Default: %(default)s")
    ap.add_argument("--new-tokens", type=int, default=32, help="tokens per sequence. Default: %(default)s")
    ap.add_argument("--temperature", type=float, default=1.0, help="sampling temperature. Default: %(default)s")
    ap.add_argument("--threads", type=int, default=1, help="torch threads. Default: %(default)s")
    args = ap.parse_args()

    configure_threads(args.threads)
    baseline = BaselineEngine(threads=args.threads)
    engines = {k: ReferenceSpeculativeEngine(baseline.model, k=k, threads=args.threads) for k in args.k}
    draft = engines[args.k[0]].draft
    tok = ByteTokenizer()
    prompts = tuple(tuple(tok.encode(p)) for p in DEFAULT_PROMPTS[:8])
    context = sum(map(len, prompts)) // len(prompts)
    params = SamplingParams(temperature=args.temperature, max_new_tokens=args.new_tokens, ignore_eos=True)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    print(f"target {count(baseline.model) / 1e6:.3f} M params, draft {count(draft) / 1e6:.3f} M params, "
          f"{len(prompts)} prompts (mean {context} tokens), T={args.temperature:g}, {args.new_tokens} new tokens, "
          f"{torch.get_num_threads()} thread(s), rates from CPU time")
    print(f"{'batch':>5} {'k':>2} | {'baseline tok/s':>14} {'reference tok/s':>15} | {'a':>5} {'acc/drf':>8} {'c':>5} {'v':>5} | "
          f"{'predicted':>9} {'refined':>9} {'measured':>8}")
    for batch in args.batch:
        rows = max(batch, args.rows // 4 if batch == 1 else args.rows)
        n = max(1, rows // len(prompts))
        request = SampleRequest(prompts=prompts, params=params, n=n, seed=0, batch_size=batch)
        tokens = n * len(prompts) * args.new_tokens
        baseline.sample(SampleRequest(prompts=prompts[:batch], params=params, n=1, seed=0, batch_size=batch))
        base_s, _ = cpu_seconds(lambda r=request: baseline.sample(r))
        decode = decode_forward_seconds(baseline.model, batch, context)
        c = decode_forward_seconds(draft, batch, context) / decode
        for k, engine in engines.items():
            v = decode_forward_seconds(baseline.model, batch, context, width=k + 1) / decode
            spec_s, out = cpu_seconds(lambda e=engine, r=request: e.sample(r))
            a = out.accepted_tokens / out.info["accept_tests"]
            print(f"{batch:>5} {k:>2} | {tokens / base_s:>14.1f} {tokens / spec_s:>15.1f} | {a:>5.3f} "
                  f"{out.acceptance_rate:>8.3f} {c:>5.3f} {v:>5.2f} | {leviathan_speedup(a, k, c):>8.2f}x "
                  f"{leviathan_speedup(a, k, c, verify=v):>8.2f}x {base_s / spec_s:>7.2f}x")


if __name__ == "__main__":
    main()
