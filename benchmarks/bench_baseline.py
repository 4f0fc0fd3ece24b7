"""Sequences per second of BaselineEngine vs transformers' ``model.generate(do_sample=True)``.

Same model, same prompt, same batch size, same number of new tokens (EOS disabled on both
sides: ``ignore_eos`` for the engine, ``min_new_tokens`` for generate, so every row has
exactly ``--new-tokens`` tokens). One warm-up call each, then the best of ``--repeats``.
Goal: BaselineEngine >= 2x generate.

Usage: python benchmarks/bench_baseline.py [--batch 64] [--rows 256] [--new-tokens 16]
       [--threads 1] [--model DIR]   (default model: the bundled target)
"""

from __future__ import annotations

import argparse
import time

import torch

from harness.engines._hf_utils import load_causal_lm
from harness.engines._torch import configure_threads
from harness.engines.base import SampleRequest
from harness.engines.baseline import BaselineEngine
from harness.models import ByteTokenizer
from harness.params import SamplingParams

PROMPT = "def get(self, key):\n    return self._data[key]\n\ndef "


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
    ap.add_argument("--batch", type=int, default=64, help="rows per forward batch. Default: %(default)s")
    ap.add_argument("--rows", type=int, default=256, help="sequences sampled per timing. Default: %(default)s")
    ap.add_argument("--new-tokens", type=int, default=16, help="tokens per sequence. Default: %(default)s")
    ap.add_argument("--repeats", type=int, default=3, help="timings per side (best kept). Default: %(default)s")
    ap.add_argument("--threads", type=int, default=1, help="torch threads. Default: %(default)s")
    ap.add_argument("--model", default=None, help="model folder. Default: the bundled target")
    args = ap.parse_args()

    configure_threads(args.threads)
    model = load_causal_lm(args.model, role="target")
    engine = BaselineEngine(model, threads=args.threads)
    prompt = ByteTokenizer().encode(PROMPT)
    shape = (prompt, args.rows, args.batch, args.new_tokens)
    time_engine(engine, prompt, args.batch, args.batch, args.new_tokens, 0)  # warm-up
    time_generate(model, prompt, args.batch, args.batch, args.new_tokens, 0)
    ours = min(time_engine(engine, *shape, seed=s) for s in range(args.repeats))
    theirs = min(time_generate(model, *shape, seed=s) for s in range(args.repeats))
    params = sum(p.numel() for p in model.parameters())
    print(f"model: {params / 1e6:.3f} M params, prompt {len(prompt)} tokens, {args.new_tokens} new tokens, "
          f"batch {args.batch}, {args.rows} rows, {torch.get_num_threads()} thread(s)")
    print(f"BaselineEngine         : {args.rows / ours:8.1f} sequences/s  ({ours:.3f} s)")
    print(f"model.generate(sample) : {args.rows / theirs:8.1f} sequences/s  ({theirs:.3f} s)")
    print(f"speed-up               : {theirs / ours:8.2f}x  (goal >= 2x)")


if __name__ == "__main__":
    main()
