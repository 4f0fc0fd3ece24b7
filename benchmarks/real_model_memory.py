"""Peak memory of the oracle on SmolLM2-135M (vocabulary 49 152), in fresh processes.

Stage 1 samples ``--rows`` rows of ``--new-tokens`` tokens (baseline engine, chat prompts, EOS
allowed) and saves them. Then, each in its own fresh process so that one peak does not hide
another: the model loaded alone; the oracle scoring those rows with ``share_prefix`` on and off.
Prints peak RSS (``resource.getrusage``, MB) of each process and its wall time. The oracle's own
working memory is its peak minus the model-only peak (the logits budget is 2**25 floats per
forward, 128 MiB, plus the per-token fields).

Usage: python benchmarks/real_model_memory.py [--rows 2048] [--new-tokens 16] [--target DIR]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROMPTS = (
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Name three colours.",
    "What is 17 times 23?",
)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: kB


def chat(folder: str) -> list[tuple[int, ...]]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    return [tuple(tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                          tokenize=True, return_dict=False)) for p in PROMPTS]


def stage(name: str, target: str, data: Path, rows: int, new_tokens: int) -> dict:
    import numpy as np
    import torch

    from speceq.core.params import SamplingParams
    from speceq.engines.base import SampleBatch, SampleRequest
    from speceq.models.hf_utils import load_causal_lm

    torch.set_num_threads(1)
    start = time.perf_counter()
    params = SamplingParams(temperature=1.0, max_new_tokens=new_tokens)
    out: dict = {"stage": name}
    if name == "sample":
        from speceq.engines.baseline import BaselineEngine

        model = load_causal_lm(target, role="target")
        prompts = chat(str(model.config._name_or_path))
        engine = BaselineEngine(model)
        batch = engine.sample(SampleRequest(prompts=tuple(prompts), params=params, n=rows // len(prompts), seed=0,
                                            batch_size=256))
        np.savez(data, tokens=batch.tokens, lengths=batch.lengths, prompt_index=batch.prompt_index,
                 prompts=np.array(json.dumps([list(p) for p in prompts])))
        out["tokens"] = int(batch.lengths.sum())
    elif name == "model":
        load_causal_lm(target, role="target")
    else:
        from speceq.oracles.hf import TargetOracle

        saved = np.load(data)
        prompts = [tuple(p) for p in json.loads(str(saved["prompts"]))]
        batch = SampleBatch(tokens=saved["tokens"], lengths=saved["lengths"], prompt_index=saved["prompt_index"])
        oracle = TargetOracle(target, share_prefix=(name == "oracle-share-prefix"))
        scores = oracle.score(prompts, batch, params)
        out["tokens"] = int(scores.token.size)
    out["seconds"] = time.perf_counter() - start
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2048)
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--target", default=None)
    ap.add_argument("--stage", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--data", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.target is None:
        from speceq.models.smollm2 import prepared

        args.target = str(prepared().target)
    if args.stage:
        print(json.dumps(stage(args.stage, args.target, Path(args.data), args.rows, args.new_tokens)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "rows.npz"
        for name in ("sample", "model", "oracle-whole-rows", "oracle-share-prefix"):
            done = subprocess.run([sys.executable, __file__, "--stage", name, "--data", str(data), "--target",
                                   args.target, "--rows", str(args.rows), "--new-tokens", str(args.new_tokens)],
                                  capture_output=True, text=True, check=True)
            result = json.loads(done.stdout.strip().splitlines()[-1])
            extra = f", {result['tokens']} tokens" if "tokens" in result else ""
            print(f"{name:<22} peak RSS {result['peak_rss_mb']:7.0f} MB   {result['seconds']:6.1f} s{extra}", flush=True)


if __name__ == "__main__":
    main()
