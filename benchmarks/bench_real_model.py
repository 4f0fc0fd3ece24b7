"""What speceq's engines and oracle cost per generated token on SmolLM2-135M, against plain torch.

For each dtype and batch size: one chat prompt (the model's chat template), ``--new-tokens`` tokens
per row with EOS disabled (``ignore_eos``: every row has the same length), ``batch`` rows in one
batch. Prints milliseconds per generated token (CPU time of the process, which a busy shared machine
disturbs less than wall time; wall time in brackets; ``--threads`` threads) and the ratio to the
limit: a plain torch decode loop of the same rows (the prompt prefilled once and its KV cache copied
to every row, then one argmax token per row and step), through transformers' forward and through speceq's lean forward
(:mod:`speceq.models.fast_forward`); the limit is the faster of the two. Engines: ``baseline``,
``reference`` (with the prepared draft, ``--k`` drafts per step; its acceptance in brackets),
``hf-sample``, and at batch 1 only (transformers runs them one row at a time) ``hf-assisted`` and
``hf-prompt-lookup``; the oracle scores the baseline's rows (per scored token), whole rows and with
``share_prefix``. Models are loaded once per dtype and shared by every engine.

Usage: python benchmarks/bench_real_model.py [--dtypes float32 bfloat16] [--batches 1 64 256]
       [--new-tokens 16] [--rows-batch1 4] [--k 3] [--threads 1] [--target DIR --draft DIR]
       (default models: ``speceq smollm2 prepare``)
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import time
from collections.abc import Callable
from typing import Any

import torch

from speceq.core.params import SamplingParams
from speceq.engines.base import SampleRequest
from speceq.engines.baseline import BaselineEngine
from speceq.engines.hf import HFAssistedEngine, HFPromptLookupEngine, HFSampleEngine
from speceq.engines.reference import ReferenceSpeculativeEngine
from speceq.models.fast_forward import fast_forward_enabled, fast_model
from speceq.models.hf_utils import load_causal_lm
from speceq.models.torch_utils import cache_kwarg, configure_threads
from speceq.oracles.hf import TargetOracle

PROMPT = "List the days of the week, then list them again in reverse order."


def chat_prompt(folder: str) -> tuple[int, ...]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    ids = tok.apply_chat_template([{"role": "user", "content": PROMPT}], add_generation_prompt=True,
                                  tokenize=True, return_dict=False)
    return tuple(int(i) for i in ids)


def torch_limit(model: Any, prompt: tuple[int, ...], rows: int, new_tokens: int, lean: bool) -> None:
    """A plain decode loop: prefill the prompt once, copy its KV cache to ``rows`` rows, then
    ``new_tokens - 1`` steps of one argmax token per row (what any sampler must at least do)."""
    ids = torch.tensor([prompt])
    with torch.inference_mode():
        if lean:
            fast = fast_model(model)
            assert fast is not None, "the lean forward does not serve this model"
            cache = fast.new_cache()
            logits = fast(ids, cache=cache, logits_to_keep=1)
            cache.keys = [k.expand(rows, -1, -1, -1).contiguous() for k in cache.keys]
            cache.values = [v.expand(rows, -1, -1, -1).contiguous() for v in cache.values]
            tok = logits[:, -1:].argmax(-1).expand(rows, 1)
            for _ in range(new_tokens - 1):
                tok = fast(tok, cache=cache)[:, -1:].argmax(-1)
        else:
            from transformers import DynamicCache

            cache = DynamicCache(config=model.config)
            kw = cache_kwarg(model)
            logits = model(input_ids=ids, use_cache=True, logits_to_keep=1, **{kw: cache}).logits
            cache.batch_repeat_interleave(rows)
            tok = logits[:, -1:].argmax(-1).expand(rows, 1)
            for _ in range(new_tokens - 1):
                tok = model(input_ids=tok, use_cache=True, **{kw: cache}).logits[:, -1:].argmax(-1)


def _repeat(times: int, fn: Callable[..., Any], *args: Any) -> None:
    for _ in range(times):
        fn(*args)


def cpu_seconds(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """(CPU seconds of this process, wall seconds, result) of ``fn()``: CPU time is what a busy
    shared machine disturbs least (one torch thread: CPU time = compute time)."""
    cpu, wall = time.process_time(), time.perf_counter()
    out = fn()
    return time.process_time() - cpu, time.perf_counter() - wall, out


def make_engine(name: str, target: Any, draft: Any, dtype: str, k: int) -> Any:
    """The engine ``name`` on the already loaded models (shared, not copied)."""
    if name == "baseline":
        return BaselineEngine(target, dtype=dtype)
    if name == "reference":
        return ReferenceSpeculativeEngine(target, draft, k=k, dtype=dtype)
    if name == "hf-sample":
        return HFSampleEngine(target, dtype=dtype)
    if name == "hf-assisted":
        return HFAssistedEngine(target, draft, num_assistant_tokens=k, dtype=dtype)
    if name == "hf-prompt-lookup":
        return HFPromptLookupEngine(target, dtype=dtype)
    raise ValueError(name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 64, 256])
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--rows-batch1", type=int, default=4, help="rows timed at batch 1. Default: %(default)s")
    ap.add_argument("--k", type=int, default=3, help="draft tokens per step (reference, hf-assisted)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--target", default=None)
    ap.add_argument("--draft", default=None)
    ap.add_argument("--skip", nargs="*", default=[], help="engines to leave out (names as printed)")
    ap.add_argument("--json", default=None, help="also write the rows to this JSON file")
    args = ap.parse_args()
    configure_threads(args.threads)
    if args.target is None or args.draft is None:
        from speceq.models.smollm2 import prepared

        world = prepared()
        args.target = args.target or str(world.target)
        args.draft = args.draft or str(world.draft)
    results: list[dict[str, Any]] = []
    print(f"{torch.get_num_threads()} thread(s), {args.new_tokens} new tokens per row, ignore_eos; "
          "ms per generated token (CPU time of this process), ratio to the torch limit; [wall time]", flush=True)
    for dtype in args.dtypes:
        target = load_causal_lm(args.target, role="target", dtype=dtype)
        draft = load_causal_lm(args.draft, role="draft", dtype=dtype)
        prompt = chat_prompt(str(target.config._name_or_path))
        for batch in args.batches:
            rows = args.rows_batch1 if batch == 1 else batch
            tokens = rows * args.new_tokens
            params = SamplingParams(temperature=1.0, max_new_tokens=args.new_tokens, ignore_eos=True)
            request = SampleRequest(prompts=(prompt,), params=params, n=rows, seed=0, batch_size=batch)
            cpu: dict[str, float] = {}
            wall: dict[str, float] = {}
            extra: dict[str, str] = {}

            def measure(name: str, fn: Callable[[], Any], cpu=cpu, wall=wall) -> Any:
                cpu[name], wall[name], out = cpu_seconds(fn)
                return out

            for lean in (False, True):
                with fast_forward_enabled(lean):
                    label = "torch forward (lean)" if lean else "torch forward (transformers)"
                    torch_limit(target, prompt, batch, 2, lean)  # warm-up
                    measure(label, functools.partial(_repeat, rows // batch, torch_limit, target, prompt, batch,
                                                     args.new_tokens, lean))
            limit = min(cpu["torch forward (transformers)"], cpu["torch forward (lean)"])
            names = ["baseline", "reference", "hf-sample"] + (["hf-assisted", "hf-prompt-lookup"] if batch == 1 else [])
            baseline_out = None
            for name in names:
                if name in args.skip:
                    continue
                engine = make_engine(name, target, draft, dtype, args.k)
                out = measure(name, functools.partial(engine.sample, request))
                if out.acceptance_rate is not None:
                    extra[name] = f"acceptance {out.acceptance_rate:.2f}"
                if name == "baseline":
                    baseline_out = out
                del engine
            if baseline_out is not None and "oracle" not in args.skip:
                for share in (False, True):
                    oracle = TargetOracle(target, dtype=dtype, share_prefix=share)
                    label = "oracle (share_prefix)" if share else "oracle (whole rows)"
                    measure(label, functools.partial(oracle.score, [prompt], baseline_out, params))
                    del oracle
            print(f"-- {dtype}, batch {batch}, {rows} rows ({tokens} tokens); limit {limit / tokens * 1e3:.2f} ms/token "
                  "(CPU time)", flush=True)
            for name, seconds in cpu.items():
                ms = seconds / tokens * 1e3
                note = f"  ({extra[name]})" if name in extra else ""
                print(f"   {name:<30} {ms:9.2f} ms/token  {seconds / limit:6.2f}x   [wall {wall[name] / tokens * 1e3:.2f}]"
                      f"{note}", flush=True)
                results.append({"dtype": dtype, "batch": batch, "rows": rows, "what": name, "cpu_s": seconds,
                                "wall_s": wall[name], "ms_per_token": ms, "ratio": seconds / limit,
                                "note": extra.get(name)})
            gc.collect()
        del target, draft
        gc.collect()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
