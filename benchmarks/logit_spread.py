"""How far bf16 / fp16 logits of the bundled models are from float32: the spread that sets the support margin.

The support hard failure (``--support-margin-nats``, :mod:`speceq.stats.support_margin`) calls
a token impossible only when no engine whose raw logits l' satisfy
max_i (l'_i - l_i) - min_i (l'_i - l_i) <= Delta could emit it. This script measures that
spread on the bundled models: rows are sampled (T = 1) by the low-dtype model stepping through
its KV cache (the engines' path), with the low-dtype logits of every step kept; the float32
model then scores the same sequences by a full-sequence forward (the oracle's path); at every
generated position the spread max(d) - min(d) of d = l_low - l_float32 over the vocabulary is
recorded (finite logits only). Also the low-dtype full-sequence forward (the spread an oracle in
the engines' dtype would see). Prints a markdown table; ``--json`` writes the numbers.

``--models smollm2`` (SmolLM2-135M-Instruct, prepared by ``speceq smollm2 prepare``) uses the
prompts of its cases (the three chats, rendered with its chat template) and the default prompts
as plain text, and keeps only the positions an engine reaches: up to and including the step
that emits ``<|im_end|>`` (most chat answers end there after a word or two).

Usage (about 3 minutes on the 2-core CPU machine)::

    python benchmarks/logit_spread.py --rows 64 --length 32 --json /tmp/spread.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from speceq.models import ByteTokenizer, load_draft, load_model, load_target
from speceq.models.bpe import encode_prompts, load_bpe_draft, load_bpe_target
from speceq.models.fast_forward import fast_model
from speceq.models.prompts import DEFAULT_PROMPTS
from speceq.models.smollm2 import CHATS, prepared
from speceq.models.torch_utils import first_eos_id

#: Tail cuts C (nats) measured; the default rule's is speceq.stats.support_margin.TAIL_NATS.
TAILS = (10.0, 15.0, 20.0, float("inf"))


def load_smollm2(*, dtype: torch.dtype) -> Any:
    """The prepared SmolLM2-135M-Instruct target (ConfigError saying how to prepare it when missing)."""
    return load_model(prepared().target, dtype=dtype)


MODELS: dict[str, tuple[Callable[..., Any], str]] = {
    "target": (load_target, "bytes"), "draft": (load_draft, "bytes"),
    "bpe-target": (load_bpe_target, "bpe"), "bpe-draft": (load_bpe_draft, "bpe"),
    "smollm2": (load_smollm2, "smollm2"),
}


def prompts_for(kind: str) -> list[list[int]]:
    if kind == "bytes":
        tok = ByteTokenizer()
        return [tok.encode(p) for p in DEFAULT_PROMPTS]
    if kind == "bpe":
        return encode_prompts(DEFAULT_PROMPTS)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(prepared().target), local_files_only=True)
    chats = [tok.apply_chat_template([dict(m) for m in chat], add_generation_prompt=True, tokenize=True,
                                     return_dict=False) for chat in CHATS.values()]
    return [[int(i) for i in ids] for ids in chats] + [tok.encode(p) for p in DEFAULT_PROMPTS]


def reached(gen: torch.Tensor, eos: int | None) -> torch.Tensor:
    """Which steps an engine computes, ``[rows, L]`` bool: all, or up to the first ``eos`` (included)."""
    if eos is None:
        return torch.ones_like(gen, dtype=torch.bool)
    ended = torch.cumsum((gen == eos).long(), dim=1) - (gen == eos).long()  # EOS among the earlier tokens
    return ended == 0


def spread(low: torch.Tensor, ref: torch.Tensor, tail_nats: float) -> torch.Tensor:
    """The smallest margin Delta for which ``low`` is within the rule of ``ref``, per row: ``[n, V] -> [n]``.

    Tokens of float32 log-probability >= -tail_nats: max - min of d = low - ref over them; the
    others must stay at most at log-probability -tail_nats + Delta / 2 after the same centring
    c (the midpoint of d over the first set), i.e. Delta >= 2 (low_j - c - (LSE(ref) - tail_nats)).
    """
    ref = ref.double()
    d = low.double() - ref
    lse = torch.logsumexp(ref, dim=-1, keepdim=True)
    head = torch.isfinite(d) & (ref - lse >= -tail_nats)
    hi = torch.where(head, d, torch.full_like(d, -torch.inf)).max(dim=-1).values
    lo = torch.where(head, d, torch.full_like(d, torch.inf)).min(dim=-1).values
    c = (hi + lo) / 2
    tail = torch.isfinite(d) & ~head
    rise = torch.where(tail, low.double() - c[:, None] - (lse - tail_nats), torch.full_like(d, -torch.inf))
    return torch.maximum(hi - lo, 2 * rise.max(dim=-1).values)


def sample_with_cache(model: Any, prompt: list[int], rows: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(generated ids ``[rows, length]``, the low-dtype logits of every step ``[rows, length, V]`` float32)."""
    fast = fast_model(model)
    gen = torch.Generator().manual_seed(seed)
    ids = torch.tensor(prompt, dtype=torch.long)[None, :].expand(rows, -1).contiguous()
    with torch.inference_mode():
        if fast is not None:
            cache = fast.new_cache()
            logits = fast(ids, None, None, cache)[:, -1].float()
        else:
            out = model(input_ids=ids, use_cache=True)
            cache, logits = out.past_key_values, out.logits[:, -1].float()
        toks, steps = [], []
        for _ in range(length):
            steps.append(logits)
            nxt = torch.multinomial(torch.softmax(logits.double(), dim=-1), 1, generator=gen)  # [rows, 1]
            toks.append(nxt[:, 0])
            if fast is not None:
                logits = fast(nxt, None, None, cache)[:, -1].float()
            else:
                out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
                cache, logits = out.past_key_values, out.logits[:, -1].float()
    return torch.stack(toks, dim=1), torch.stack(steps, dim=1)


def full_forward(model: Any, prompt: list[int], gen: torch.Tensor) -> torch.Tensor:
    """Next-token logits at every generated position by one full-sequence forward, ``[rows, L, V]`` float32."""
    ids = torch.cat([torch.tensor(prompt, dtype=torch.long)[None, :].expand(gen.shape[0], -1), gen], dim=1)
    with torch.inference_mode():
        fast = fast_model(model)
        logits = fast(ids[:, :-1]) if fast is not None else model(input_ids=ids[:, :-1]).logits
    return logits[:, len(prompt) - 1 :].float()


def summary(values: np.ndarray) -> dict[str, float]:
    return {"positions": int(values.size), "median": float(np.median(values)), "p99": float(np.quantile(values, 0.99)),
            "p999": float(np.quantile(values, 0.999)), "max": float(values.max())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--dtypes", default="bfloat16,float16")
    ap.add_argument("--rows", type=int, default=64, help="rows sampled per prompt")
    ap.add_argument("--length", type=int, default=32, help="generated tokens per row")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.time()
    report: dict[str, Any] = {"rows": args.rows, "length": args.length, "prompts": len(DEFAULT_PROMPTS), "results": []}
    print("| model | dtype | tail cut C (nats) | positions | engine path (KV-cache steps) vs float32 full forward: median / p99 / p99.9 / "
          "max spread (nats) | low-dtype full forward vs float32: max spread |")
    print("|---|---|---|---|---|---|")
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        loader, kind = MODELS[name]
        ref = loader(dtype=torch.float32).eval()
        prompts = prompts_for(kind)
        for dtype in [d.strip() for d in args.dtypes.split(",") if d.strip()]:
            low = loader(dtype=getattr(torch, dtype)).eval()
            cached: dict[float, list[np.ndarray]] = {}
            full: dict[float, list[np.ndarray]] = {}
            for j, prompt in enumerate(prompts):
                gen, steps = sample_with_cache(low, prompt, args.rows, args.length, args.seed * 1009 + j)
                keep = reached(gen, first_eos_id(ref.config) if kind == "smollm2" else None)  # <|im_end|>
                ref_logits = full_forward(ref, prompt, gen)[keep]
                low_full = full_forward(low, prompt, gen)[keep]
                steps = steps[keep]
                for cut in TAILS:
                    cached.setdefault(cut, []).append(spread(steps, ref_logits, cut).numpy())
                    full.setdefault(cut, []).append(spread(low_full, ref_logits, cut).numpy())
            for cut in TAILS:
                c, f = summary(np.concatenate(cached[cut])), summary(np.concatenate(full[cut]))
                report["results"].append({"model": name, "dtype": dtype, "tail_nats": cut, "engine_path": c,
                                          "low_full_forward": f})
                print(f"| {name} | {dtype} | {cut:g} | {c['positions']} | {c['median']:.3f} / {c['p99']:.3f} / "
                      f"{c['p999']:.3f} / **{c['max']:.3f}** | {f['max']:.3f} |", flush=True)
            print(f"[{time.time() - t0:6.0f} s] {name} {dtype} done", file=sys.stderr, flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
