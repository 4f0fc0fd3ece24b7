"""speceq's ``vllm`` processing profile checked against vLLM's own V1 sampler (no server, no model).

Run by the vLLM venv's Python (it imports vllm and speceq's ``core``, which needs only torch;
speceq is mapped from this checkout, as the kernel check's worker does). For random logits at
several vocabulary sizes, each batch holds requests with DIFFERENT parameters; the processed law
of every request is computed twice:

- by vLLM: ``vllm.v1.sample.sampler.Sampler(logprobs_mode="processed_logprobs")`` called on a
  ``SamplingMetadata`` built as vLLM's input batch builds it (per-request temperature, top-k,
  top-p and penalty tensors; prompts padded with ``vocab_size``; output-token histories), with
  vLLM's own ``LogitBiasLogitsProcessor`` and ``MinPLogitsProcessor`` fed the requests'
  ``vllm.SamplingParams``. ``max_num_logprobs=-1`` returns the whole processed log-law (after
  logit bias, penalties, temperature, min-p, top-k and top-p), so the processed law is vLLM's,
  not a transcription of it; greedy requests are compared by the token vLLM samples;
- by :func:`speceq.core.processing.process_logits` with the same request's
  :class:`speceq.core.params.SamplingParams` (``processing="vllm"``) and
  :class:`speceq.core.processing.TokenHistory`.

The batches: one per field (only that field varies across the requests), one with every field
varied per request, one mixing greedy and random requests. Agreement is the largest absolute
difference of probabilities over the vocabulary (to ``--tol``, default 1e-6), reported per field.

``--logits bfloat16`` rounds the random logits to bfloat16 values, as a bfloat16 model's are, so
tokens tie at the top-k, top-p and min-p cuts and the tie rules are compared too.

``--mutant NAME`` replaces the speceq side with a copy of the ``vllm`` order carrying one
deliberate error (two steps swapped, a penalty over the wrong history, a different tie rule);
``--self-test`` runs every mutant and requires each to be caught, so the check is shown able to
fail. The tie-rule mutants (:data:`TIE_MUTANTS`) differ only where logits tie: the self-test runs
them on bfloat16 logits whatever ``--logits`` says.

Exit codes: 0 agreement (or, with --self-test, every mutant caught); 1 disagreement (or a
mutant not caught); 2 error.

    .venv-vllm/bin/python scripts/vllm/processing_check.py              # exit 0: agreement
    .venv-vllm/bin/python scripts/vllm/processing_check.py --logits bfloat16  # exit 0: agreement, ties
    .venv-vllm/bin/python scripts/vllm/processing_check.py --self-test  # exit 0: every mutant caught
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

VOCABS = (32, 1000, 49152)
ROWS = 6
FIELDS = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "frequency_penalty",
          "presence_penalty", "logit_bias", "all", "greedy+random")

#: Mutants of the speceq side: name -> what is wrong.
MUTANTS = {
    "minp-before-temperature": "min-p measured on the untempered law",
    "topp-before-topk": "top-p applied before top-k",
    "penalties-before-bias": "penalties applied before logit bias",
    "presence-before-frequency-rep-last": "repetition applied after frequency and presence",
    "repetition-outputs-only": "repetition penalty over the generated tokens only (prompt ignored)",
    "history-one-late": "the penalty history misses the last generated token",
    "presence-over-prompt": "presence penalty counts prompt tokens too",
    "topk-exactly-k": "top-k keeps exactly k tokens (ties at the k-th value to the lowest ids)",
    "topp-ties-by-id": "top-p ranks tied tokens by token id (a stable sort), not in the order of vLLM's sort",
}
#: Mutants that differ from the profile only where logits tie (run on bfloat16 logits by the self-test).
TIE_MUTANTS = ("topk-exactly-k", "topp-ties-by-id")


def request_params(field: str, row: int, vocab: int, rng, logits_row, speceq_params):
    """The speceq SamplingParams, prompt and generated tokens of one request of a ``field`` batch."""
    import numpy as np

    top = np.argsort(-logits_row)[: max(8, min(40, vocab // 4))]  # likely tokens: penalties and bias bite
    kw: dict = {}
    vary = (field,) if field not in ("all", "greedy+random") else (
        "temperature", "top_k", "top_p", "min_p", "repetition_penalty", "frequency_penalty",
        "presence_penalty", "logit_bias")
    for f in vary:
        if f == "temperature":
            kw["temperature"] = float(rng.choice([0.3, 0.7, 1.0, 1.3, 2.0]))
        elif f == "top_k":
            kw["top_k"] = int(rng.choice([0, 1, 3, max(2, vocab // 10), vocab - 1]))
        elif f == "top_p":
            kw["top_p"] = float(rng.choice([1.0, 0.95, 0.8, 0.5, 0.2]))
        elif f == "min_p":
            kw["min_p"] = float(rng.choice([0.0, 0.01, 0.05, 0.2, 0.6]))
        elif f == "repetition_penalty":
            kw["repetition_penalty"] = float(rng.choice([1.0, 0.8, 1.1, 1.5, 2.5]))
        elif f == "frequency_penalty":
            kw["frequency_penalty"] = float(rng.choice([0.0, -0.5, 0.3, 1.0, 2.0]))
        elif f == "presence_penalty":
            kw["presence_penalty"] = float(rng.choice([0.0, -0.5, 0.4, 1.0, 2.0]))
        elif f == "logit_bias":
            ids = rng.choice(np.concatenate([top[:6], rng.integers(0, vocab, 4)]), size=5, replace=False)
            kw["logit_bias"] = {int(t): float(np.round(rng.uniform(-6, 6), 3)) for t in ids}
    if field == "greedy+random" and row % 2 == 0:
        kw["temperature"] = 0.0
    params = speceq_params(**kw)
    # histories: a prompt and generated tokens drawn mostly from the likely tokens, with repeats
    prompt = [int(t) for t in rng.choice(np.concatenate([top, rng.integers(0, vocab, 8)]), size=int(rng.integers(1, 12)))]
    output = [int(t) for t in rng.choice(np.concatenate([top, rng.integers(0, vocab, 8)]), size=int(rng.integers(0, 10)))]
    return params, prompt, output


def vllm_processed(logits, rows, vocab: int):
    """vLLM's processed law per request: (log-probabilities [rows, V], sampled tokens [rows])."""
    import torch
    from vllm import SamplingParams as VSamplingParams
    from vllm.v1.sample.logits_processor import LogitsProcessors
    from vllm.v1.sample.logits_processor.builtin import LogitBiasLogitsProcessor, MinPLogitsProcessor
    from vllm.v1.sample.logits_processor.interface import BatchUpdate
    from vllm.v1.sample.metadata import SamplingMetadata
    from vllm.v1.sample.sampler import Sampler

    n = len(rows)
    vparams = []
    for p, _, _ in rows:
        vparams.append(VSamplingParams(
            temperature=p.temperature, top_k=p.top_k, top_p=p.top_p, min_p=p.min_p,
            repetition_penalty=p.repetition_penalty, presence_penalty=p.presence_penalty,
            frequency_penalty=p.frequency_penalty, logit_bias=dict(p.logit_bias) or None, max_tokens=8))
    config = SimpleNamespace(scheduler_config=SimpleNamespace(max_num_seqs=max(n, 8)))
    procs = [LogitBiasLogitsProcessor(config, torch.device("cpu"), False),
             MinPLogitsProcessor(config, torch.device("cpu"), False)]
    update = BatchUpdate(batch_size=n, removed=[], moved=[],
                         added=[(i, vp, prompt, out) for i, (vp, (_, prompt, out)) in enumerate(zip(vparams, rows))])
    for proc in procs:
        proc.update_state(update)
    # as vLLM's input batch fills them: top_k off = vocab size, top_p off = 1, None when no request uses it
    greedy = [p.temperature == 0.0 for p, _, _ in rows]
    top_k = [p.top_k if 0 < p.top_k < vocab else vocab for p, _, _ in rows]
    top_p = [p.top_p for p, _, _ in rows]
    no_penalties = all(p.repetition_penalty == 1.0 and p.presence_penalty == 0.0 and p.frequency_penalty == 0.0
                       for p, _, _ in rows)
    longest = max(len(prompt) for _, prompt, _ in rows)
    prompt_ids = torch.full((n, longest), vocab, dtype=torch.int64)
    for i, (_, prompt, _) in enumerate(rows):
        prompt_ids[i, : len(prompt)] = torch.tensor(prompt, dtype=torch.int64)
    meta = SamplingMetadata(
        temperature=torch.tensor([0.0 if g else p.temperature for g, (p, _, _) in zip(greedy, rows)],
                                 dtype=torch.float32),
        all_greedy=all(greedy), all_random=not any(greedy),
        top_p=None if all(v == 1.0 for v in top_p) else torch.tensor(top_p, dtype=torch.float32),
        top_k=None if all(v == vocab for v in top_k) else torch.tensor(top_k, dtype=torch.int32),
        generators={}, max_num_logprobs=-1, no_penalties=no_penalties,
        prompt_token_ids=prompt_ids,
        frequency_penalties=torch.tensor([p.frequency_penalty for p, _, _ in rows], dtype=torch.float32),
        presence_penalties=torch.tensor([p.presence_penalty for p, _, _ in rows], dtype=torch.float32),
        repetition_penalties=torch.tensor([p.repetition_penalty for p, _, _ in rows], dtype=torch.float32),
        output_token_ids=[list(out) for _, _, out in rows],
        allowed_token_ids_mask=None, bad_words_token_ids={}, logitsprocs=LogitsProcessors(procs))
    out = Sampler(logprobs_mode="processed_logprobs")(logits.clone(), meta)
    logprobs = out.logprobs_tensors.logprobs if out.logprobs_tensors is not None else None
    return logprobs, out.sampled_token_ids[:, 0].long()


def mutant_law(name: str, logits, params, history):
    """The ``vllm`` order with the error ``name`` (:data:`MUTANTS`), from speceq's public step functions."""
    import torch

    from speceq.core.processing import (
        TokenHistory,
        bias_and_penalties,
        min_p_cut,
        top_k_cut,
        top_p_cut,
    )

    x = logits.float()
    plain = replace(params, logit_bias=(), repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0)
    if name == "repetition-outputs-only":
        history = TokenHistory(torch.zeros_like(history.prompt_mask), history.output_counts)
    elif name == "history-one-late":
        history = TokenHistory(history.prompt_mask, history.output_counts - history.last_token_onehot)
    elif name == "presence-over-prompt":
        x = x - params.presence_penalty * (history.prompt_mask & (history.output_counts == 0)).float()
    if name == "penalties-before-bias":
        x = bias_and_penalties(x, replace(params, logit_bias=()), history)
        x = bias_and_penalties(x, replace(plain, logit_bias=params.logit_bias), None)
    elif name == "presence-before-frequency-rep-last":
        x = bias_and_penalties(x, replace(params, repetition_penalty=1.0), history)
        x = bias_and_penalties(x, replace(plain, repetition_penalty=params.repetition_penalty), history)
    else:
        x = bias_and_penalties(x, params, history)
    if params.greedy:
        return torch.zeros_like(x).scatter_(-1, x.argmax(dim=-1, keepdim=True), 1.0)
    if name == "minp-before-temperature":
        x = min_p_cut(x, params.min_p) / params.temperature
    else:
        x = min_p_cut(x / params.temperature, params.min_p)
    if name == "topp-before-topk":
        probs = top_p_cut(torch.softmax(x, dim=-1), params.top_p, key=x)
        x = top_k_cut(torch.log(probs), params.top_k)
        return torch.softmax(x, dim=-1)
    if name == "topk-exactly-k":
        y = x
        if 0 < params.top_k < x.shape[-1]:
            order = torch.sort(x, dim=-1, descending=True, stable=True).indices
            y = x.scatter(-1, order[..., params.top_k:], float("-inf"))
        return top_p_cut(torch.softmax(y, dim=-1), params.top_p, key=x)
    probs = torch.softmax(top_k_cut(x, params.top_k), dim=-1)
    if name == "topp-ties-by-id" and params.top_p < 1.0:
        ranked, order = torch.sort(probs, dim=-1, descending=True, stable=True)
        keep = torch.zeros_like(probs, dtype=torch.bool).scatter(
            -1, order, torch.cumsum(ranked, dim=-1) - ranked < params.top_p)
        probs = torch.where(keep, probs, torch.zeros_like(probs))
        return probs / probs.sum(dim=-1, keepdim=True)
    return top_p_cut(probs, params.top_p, key=x)


def speceq_law(logits, params, prompt, output, vocab: int, mutant: str | None):
    """speceq's processed law of one request ([V] probabilities), or a mutant's."""
    from speceq.core.processing import process_logits, token_history

    history = token_history([prompt], [output], vocab)
    if mutant is None:
        return process_logits(logits[None], params, history=history)[0]
    if mutant == "history-one-late":
        history = SimpleNamespace(prompt_mask=history.prompt_mask, output_counts=history.output_counts,
                                  last_token_onehot=token_history([[]], [output[-1:]], vocab).output_counts)
    return mutant_law(mutant, logits[None], params, history)[0]


def run(seed: int, tol: float, mutant: str | None, verbose: bool, logit_dtype: str = "float32") -> dict:
    """Every batch at every vocabulary size: the per-field agreement (largest |Δp|, worst request).

    logit_dtype: ``bfloat16`` rounds the random logits to bfloat16 values (as a bfloat16 model's
    are), so equal logits (ties) occur; ``float32`` logits are almost surely distinct."""
    import numpy as np
    import torch

    from speceq.core.params import SamplingParams

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    report: dict[str, dict] = {}
    for field in FIELDS:
        worst = {"max_abs_diff": 0.0, "requests": 0, "greedy_mismatches": 0, "support_mismatches": 0, "where": None}
        for vocab in VOCABS:
            logits = (torch.randn(ROWS, vocab, generator=torch.Generator().manual_seed(int(rng.integers(2**31))))
                      * float(rng.choice([1.0, 3.0]))).to(getattr(torch, logit_dtype)).float()
            rows = [request_params(field, r, vocab, rng, logits[r].numpy(), SamplingParams) for r in range(ROWS)]
            logprobs, sampled = vllm_processed(logits, rows, vocab)
            for r, (params, prompt, output) in enumerate(rows):
                ours = speceq_law(logits[r], params, prompt, output, vocab, mutant)
                worst["requests"] += 1
                if params.greedy:  # vLLM returns the greedy token; its logprobs row is not the law
                    if int(ours.argmax()) != int(sampled[r]) or float(ours.max()) != 1.0:
                        worst["greedy_mismatches"] += 1
                        worst["where"] = worst["where"] or {"vocab": vocab, "request": r, "params": str(params)}
                    continue
                theirs = logprobs[r].exp()
                diff = float((theirs - ours).abs().max())
                worst["support_mismatches"] += int(bool(((theirs > 0) != (ours > 0)).any()))
                if diff > worst["max_abs_diff"]:
                    worst["max_abs_diff"] = diff
                    if diff > tol:
                        worst["where"] = {"vocab": vocab, "request": r, "params": str(params),
                                          "prompt": prompt, "output": output}
        worst["agree"] = (worst["max_abs_diff"] <= tol and worst["greedy_mismatches"] == 0
                          and worst["support_mismatches"] == 0)
        report[field] = worst
        if verbose:
            flag = "ok  " if worst["agree"] else "DIFF"
            print(f"{flag} {field:<20} max |dp| {worst['max_abs_diff']:.2e} over {worst['requests']} requests"
                  f" (support mismatches {worst['support_mismatches']}, greedy mismatches"
                  f" {worst['greedy_mismatches']})")
            if not worst["agree"]:
                print(f"     first disagreement: {worst['where']}")
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tol", type=float, default=1e-6, help="largest allowed |Δp| (default 1e-6)")
    parser.add_argument("--mutant", choices=sorted(MUTANTS), default=None, help="check a deliberately wrong copy")
    parser.add_argument("--self-test", action="store_true", help="every mutant must be caught (exit 0 when so)")
    parser.add_argument("--logits", choices=("float32", "bfloat16"), default="float32",
                        help="bfloat16: logits rounded to bfloat16 values, so ties occur (see the docs' finding)")
    parser.add_argument("--json", default=None, help="write the per-field report here")
    args = parser.parse_args()

    sys.path.insert(0, str(REPO))  # tools/ of this checkout (the vLLM venv does not install speceq)
    from tools.checkout_import import import_speceq_from_checkout

    import_speceq_from_checkout(prefer_installed=False)
    import torch
    import vllm

    torch.set_num_threads(1)
    print(f"== vllm {vllm.__version__}, torch {torch.__version__}; vocab sizes {VOCABS}, {ROWS} requests per batch,"
          f" tolerance {args.tol:g}")
    if args.self_test:
        missed = []
        out = {}
        for name, what in MUTANTS.items():
            dtype = "bfloat16" if name in TIE_MUTANTS else args.logits
            report = run(args.seed, args.tol, name, verbose=False, logit_dtype=dtype)
            caught = [f for f, r in report.items() if not r["agree"]]
            out[name] = {"what": what, "logits": dtype, "caught_by": caught,
                         "max_abs_diff": max(r["max_abs_diff"] for r in report.values())}
            print(f"{'caught' if caught else 'MISSED'} mutant {name} ({what}; {dtype} logits):"
                  f" by {', '.join(caught) or 'nothing'}")
            if not caught:
                missed.append(name)
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=1))
        print(f"== self-test: {len(MUTANTS) - len(missed)} of {len(MUTANTS)} mutants caught")
        return 1 if missed else 0
    label = f"mutant {args.mutant} ({MUTANTS[args.mutant]})" if args.mutant else "speceq's vllm profile"
    print(f"== {label} against vLLM's V1 Sampler, {args.logits} logits")
    report = run(args.seed, args.tol, args.mutant, verbose=True, logit_dtype=args.logits)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    bad = [f for f, r in report.items() if not r["agree"]]
    print(f"== {'AGREE' if not bad else 'DISAGREE'}: {len(FIELDS) - len(bad)} of {len(FIELDS)} batches within"
          f" {args.tol:g}" + (f"; disagreeing: {', '.join(bad)}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
