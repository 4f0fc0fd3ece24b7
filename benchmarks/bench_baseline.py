"""Sequences per second of BaselineEngine vs transformers' ``model.generate(do_sample=True)``.

Same model, same prompt, same batch size, same number of new tokens (EOS disabled on both
sides: ``ignore_eos`` for the engine, ``min_new_tokens`` for generate, so every row has
exactly ``--new-tokens`` tokens). One warm-up call each, then the best of ``--repeats``.
Rates come from CPU time (``time.process_time``, 1 thread), which other processes on a
shared machine disturb far less than wall time; wall-time rates are printed too.
Goal: BaselineEngine >= 2x generate.

Usage: python benchmarks/bench_baseline.py [--batch 1 8 64] [--rows 128] [--new-tokens 16]
       [--threads 1] [--model DIR]   (default model: the bundled target)
"""

from __future__ import annotations

import argparse
import time

import torch

from speceq.core.params import SamplingParams
from speceq.engines.base import SampleRequest
from speceq.engines.baseline import BaselineEngine
from speceq.models import ByteTokenizer
from speceq.models.hf_utils import load_causal_lm
from speceq.models.torch_utils import configure_threads

#: A short and a long prompt (5 and 53 tokens with BOS).
PROMPTS = ("def ", "def get(self, key):\n    return self._data[key]\n\ndef ")


def time_engine(engine: BaselineEngine, prompt: list[int], rows: int, batch: int, new_tokens: int, seed: int) -> float:
    params = SamplingParams(max_new_tokens=new_tokens, ignore_eos=True)
    request = SampleRequest(prompts=(tuple(prompt),), params=params, n=rows, seed=seed, batch_size=batch)
    start = time.perf_counter()
    out = engine.sample(request)
    elapsed = time.perf_counter() - start
    assert out.rows == rows and (out.lengths == new_tokens).all()
    return elapsed


def time_generate(model, prompt: list[int], rows: int, batch: int, new_tokens: int, seed: int) -> float:
    torch.manual_seed(seed)
    start = time.perf_counter()
    with torch.inference_mode():
        for lo in range(0, rows, batch):
            size = min(batch, rows - lo)
            ids = torch.tensor([prompt] * size)
            out = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                do_sample=True,
                temperature=1.0,
                top_k=None,
                top_p=None,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                pad_token_id=model.config.pad_token_id,
            )
            assert out.shape == (size, len(prompt) + new_tokens)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8, 64], help="batch sizes. Default: %(default)s")
    ap.add_argument("--rows", type=int, default=128, help="sequences per timing (batch 1: 1/4). Default: %(default)s")
    ap.add_argument("--new-tokens", type=int, default=16, help="tokens per sequence. Default: %(default)s")
    ap.add_argument("--repeats", type=int, default=3, help="timings per side (best kept). Default: %(default)s")
    ap.add_argument("--threads", type=int, default=1, help="torch threads. Default: %(default)s")
    ap.add_argument("--model", default=None, help="model folder. Default: the bundled target")
    args = ap.parse_args()

    configure_threads(args.threads)
    model = load_causal_lm(args.model, role="target")
    engine = BaselineEngine(model, threads=args.threads)
    tok = ByteTokenizer()
    print(f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.3f} M params, {args.new_tokens} new tokens, "
          f"{torch.get_num_threads()} thread(s); rates from CPU time (process_time), wall time in brackets")
    print(f"{'prompt':>7} {'batch':>5} {'rows':>5} | {'BaselineEngine seq/s':>22} | {'generate seq/s':>22} | speed-up")
    for text in PROMPTS:
        prompt = tok.encode(text)
        for batch in args.batch:
            rows = max(batch, args.rows // 4 if batch == 1 else args.rows)
            time_engine(engine, prompt, batch, batch, args.new_tokens, 0)  # warm-up
            time_generate(model, prompt, batch, batch, args.new_tokens, 0)
            ours = best_of(args.repeats, lambda s, p=prompt, r=rows, b=batch: time_engine(engine, p, r, b, args.new_tokens, s))
            theirs = best_of(args.repeats, lambda s, p=prompt, r=rows, b=batch: time_generate(model, p, r, b, args.new_tokens, s))
            print(f"{len(prompt):>7} {batch:>5} {rows:>5} | {rows / ours[0]:>10.1f} ({rows / ours[1]:>9.1f}) | "
                  f"{rows / theirs[0]:>10.1f} ({rows / theirs[1]:>9.1f}) | {theirs[0] / ours[0]:6.2f}x")
    print("goal: >= 2x")


def best_of(repeats: int, run) -> tuple[float, float]:
    """Smallest (CPU seconds, wall seconds) over ``repeats`` runs (seed = repeat index)."""
    best_cpu, best_wall = float("inf"), float("inf")
    for seed in range(repeats):
        cpu = time.process_time()
        wall = run(seed)
        best_cpu, best_wall = min(best_cpu, time.process_time() - cpu), min(best_wall, wall)
    return best_cpu, best_wall


if __name__ == "__main__":
    main()
