"""Which draft for SmolLM2-135M-Instruct? Expected acceptance and cost of drafts derived from it.

For each candidate draft q and target p, on continuations the target samples itself from a few
chat prompts (rendered with the model's chat template), prints the mean over generated positions
of sum_x min(p(x), q(x)) after temperature T -- the probability that one speculative draft token
is accepted (Leviathan et al., Theorem 3.5) -- at T = 1 and 0.7, and the cost of one draft decode
step relative to the target's (batch 1 and 64, KV cache, ``--threads`` threads).

Candidates: truncation to the first L layers (what an untrained early exit gives); layer skipping
(keep a subset of layers, Draft & Verify, arXiv:2309.08168), both as hand-picked structured sets
and as a greedy backward elimination on calibration prompts (the layer whose removal costs the
least acceptance goes first), evaluated on held-out prompts; the target with weights rounded to
bfloat16 / int8 / int4 (per-row symmetric), and the target run in bfloat16.

Usage: python benchmarks/real_model_drafts.py [--target DIR] [--tokens 40] [--search-to 14]
       (default target: the prepared SmolLM2 folder, ``speceq smollm2 prepare``)
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from typing import Any

import torch

from speceq.models.derive import layer_skip_model, rounded_weights_model
from speceq.models.hf_utils import load_causal_lm
from speceq.models.torch_utils import cache_kwarg, configure_threads

#: Calibration prompts (the greedy search sees these only).
CALIBRATION = (
    "What is the capital of France?",
    "Write a Python function that reverses a string.",
    "Give me three tips for sleeping better.",
    "Explain photosynthesis in one sentence.",
)
#: Held-out prompts (every reported number is on these).
HELDOUT = (
    "How do I make a cup of green tea?",
    "Write a haiku about the sea.",
    "What is 17 times 23?",
    "Translate 'good morning' into Spanish and French.",
    "Summarise the plot of Romeo and Juliet in two sentences.",
    "Write a SQL query that counts the rows of a table named users.",
)


def chat_ids(tokenizer: Any, prompts: Sequence[str]) -> list[list[int]]:
    out = []
    for text in prompts:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                            tokenize=True, return_dict=False)
        out.append(list(ids))
    return out


def sample_sequences(model: Any, prompts: list[list[int]], per_prompt: int, tokens: int, temperature: float,
                     seed: int) -> list[tuple[list[int], int]]:
    """(prompt + continuation ids, prompt length) for ``per_prompt`` target samples of each prompt."""
    out = []
    with torch.inference_mode():
        for i, prompt in enumerate(prompts):
            torch.manual_seed(seed + 1000 * i)
            ids = torch.tensor([prompt] * per_prompt)
            gen = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True,
                                 temperature=temperature, top_k=0, top_p=1.0, max_new_tokens=tokens,
                                 pad_token_id=model.config.pad_token_id)
            for row in gen.tolist():
                cont = row[len(prompt):]
                eos = model.config.eos_token_id
                if eos in cont:
                    cont = cont[: cont.index(eos) + 1]
                out.append((prompt + cont, len(prompt)))
    return out


def position_logits(model: Any, seqs: list[tuple[list[int], int]]) -> list[torch.Tensor]:
    """Logits [generated positions, V] of each sequence (the law of each generated token)."""
    out = []
    with torch.inference_mode():
        for ids, plen in seqs:
            logits = model(torch.tensor([ids]), use_cache=False).logits[0]
            out.append(logits[plen - 1 : len(ids) - 1].float())
    return out


def overlap(p_logits: list[torch.Tensor], q_logits: list[torch.Tensor], temperature: float) -> float:
    """Mean over positions of sum_x min(p, q) after temperature."""
    total, count = 0.0, 0
    for lp, lq in zip(p_logits, q_logits, strict=True):
        p = torch.softmax(lp / temperature, dim=-1)
        q = torch.softmax(lq / temperature, dim=-1)
        total += float(torch.minimum(p, q).sum(-1).sum())
        count += lp.shape[0]
    return total / count


class Skipper:
    """Evaluate layer subsets of one model in place (its layer list swapped, restored after)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.layers = list(model.model.layers)

    def logits(self, keep: Sequence[int], seqs: list[tuple[list[int], int]]) -> list[torch.Tensor]:
        inner, config = self.model.model, self.model.config
        saved = (inner.layers, config.num_hidden_layers)
        inner.layers = torch.nn.ModuleList([self.layers[i] for i in keep])
        config.num_hidden_layers = len(keep)
        try:
            return position_logits(self.model, seqs)
        finally:
            inner.layers, config.num_hidden_layers = saved


def greedy_elimination(skipper: Skipper, calib: list[tuple[list[int], int]], target_logits: list[torch.Tensor],
                       steps: int, temperature: float) -> list[tuple[tuple[int, ...], float]]:
    """Backward elimination: at each step drop the layer whose removal keeps acceptance highest.
    The first and last layers are never dropped (Draft & Verify keeps them too)."""
    keep = list(range(len(skipper.layers)))
    path = []
    for step in range(steps):
        best = None
        for layer in keep[1:-1]:
            trial = [i for i in keep if i != layer]
            acc = overlap(target_logits, skipper.logits(trial, calib), temperature)
            if best is None or acc > best[1]:
                best = (layer, acc)
        assert best is not None
        keep.remove(best[0])
        path.append((tuple(keep), best[1]))
        print(f"  search step {step + 1}: drop layer {best[0]:2d} -> {len(keep)} layers, calibration "
              f"acceptance {best[1]:.3f}", flush=True)
    return path


def step_cost(model: Any, batch: int, prompt_len: int = 40, steps: int = 8) -> float:
    """Seconds per decode step (one token per row, KV cache) at ``batch`` rows, best of 3."""
    ids = torch.randint(3, 1000, (batch, prompt_len), generator=torch.Generator().manual_seed(0))
    best = float("inf")
    kw = cache_kwarg(model)
    with torch.inference_mode():
        for _ in range(3):
            out = model(ids, use_cache=True)
            cache, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
            start = time.perf_counter()
            for _ in range(steps):
                out = model(tok, use_cache=True, **{kw: cache})
                cache, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
            best = min(best, (time.perf_counter() - start) / steps)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default=None, help="model folder or .gguf. Default: the prepared SmolLM2")
    ap.add_argument("--tokens", type=int, default=40, help="sampled tokens per continuation. Default: %(default)s")
    ap.add_argument("--per-prompt", type=int, default=2, help="continuations per prompt. Default: %(default)s")
    ap.add_argument("--search-to", type=int, default=14, help="layers dropped by the greedy search. Default: %(default)s")
    ap.add_argument("--threads", type=int, default=1, help="torch threads. Default: %(default)s")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = ap.parse_args()
    configure_threads(args.threads)
    from transformers import AutoTokenizer

    if args.target is None:
        from speceq.models.smollm2 import prepared

        args.target = str(prepared().target)
    target = load_causal_lm(args.target, role="target")
    folder = str(target.config._name_or_path)
    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    n_layers = target.config.num_hidden_layers
    temps = (1.0, 0.7)
    start = time.perf_counter()
    calib = sample_sequences(target, chat_ids(tok, CALIBRATION), 1, args.tokens, 1.0, args.seed)
    held = {t: sample_sequences(target, chat_ids(tok, HELDOUT), args.per_prompt, args.tokens, t, args.seed + 1)
            for t in temps}
    p_calib = position_logits(target, calib)
    p_held = {t: position_logits(target, held[t]) for t in temps}
    print(f"target {folder}: {n_layers} layers; {sum(len(s) - n for s, n in calib)} calibration positions, "
          f"{ {t: sum(len(s) - n for s, n in held[t]) for t in temps} } held-out positions "
          f"({time.perf_counter() - start:.0f} s)", flush=True)
    skipper = Skipper(target)
    results: dict[str, Any] = {}

    def report(name: str, q_held: dict[float, list[torch.Tensor]], layers: int | None = None) -> None:
        accs = {t: overlap(p_held[t], q_held[t], t) for t in temps}
        results[name] = {"acceptance": accs, "layers": layers}
        print(f"{name:<44} " + "  ".join(f"T={t}: {a:.3f}" for t, a in accs.items()), flush=True)

    def skip_report(name: str, keep: Sequence[int]) -> None:
        report(name, {t: skipper.logits(keep, held[t]) for t in temps}, len(keep))
        results[name]["keep"] = list(keep)

    print("-- truncation (first L layers)")
    for L in (6, 15, 24):
        skip_report(f"truncate to {L}", list(range(L)))
    print("-- structured layer skipping")
    mid = list(range(1, n_layers - 1))
    skip_report(f"skip every 2nd middle layer (keep {len(mid[::2]) + 2})", sorted({0, n_layers - 1, *mid[::2]}))
    for drop in (6, 10, 14):
        lo = (n_layers - drop) // 2
        skip_report(f"skip contiguous middle {drop}", [i for i in range(n_layers) if not lo <= i < lo + drop])
    for drop in (6, 10, 14):
        skip_report(f"skip last {drop} before the final layer",
                    [i for i in range(n_layers) if not n_layers - 1 - drop <= i < n_layers - 1])
    print("-- greedy elimination on the calibration prompts (T=1)")
    path = greedy_elimination(skipper, calib, p_calib, args.search_to, 1.0)
    for keep, _ in path[3::2]:
        skip_report(f"greedy: keep {len(keep)}", keep)
    results["greedy_path"] = [{"keep": list(k), "calibration_acceptance": a} for k, a in path]
    print("-- the target with rounded weights / in bf16")
    for fmt in ("bfloat16", "int8", "int4"):
        rounded = rounded_weights_model(target, fmt)
        report(f"weights rounded to {fmt} (fp32 arithmetic)", {t: position_logits(rounded, held[t]) for t in temps})
        del rounded
    bf16 = load_causal_lm(args.target, role="draft", dtype="bfloat16")
    report("the target run in bfloat16", {t: position_logits(bf16, held[t]) for t in temps})
    del bf16
    print("-- cost of one decode step (relative to the target's)")
    costs = {}
    for batch in (1, 64):
        base = step_cost(target, batch)
        costs[batch] = {"target_s": base}
        for name, keep in (("truncate to 15", list(range(15))), *[(f"greedy: keep {len(k)}", k) for k, _ in path[3::4]]):
            draft = layer_skip_model(target, keep)
            rel = step_cost(draft, batch) / base
            costs[batch][name] = rel
            print(f"batch {batch:3d}: target {base * 1e3:.1f} ms/step; {name}: {rel:.2f}x", flush=True)
            del draft
    results["costs"] = costs
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2, default=str)
    print(f"total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
