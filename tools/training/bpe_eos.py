"""Where does the bundled BPE target put mass on ``<eos>``? A search for EOS-prone prompts.

This is the diagnostic that led to the ``<eos>`` refit (``tools.training.train_bpe.refit_eos_row``,
the last step of training): run on the unrefitted target it found no prompt above ~7e-4.

The corpus places ``<eos>`` after every file (``speceq.models.bpe.encode_corpus``), so the
natural EOS-prone prompts are file endings. This script measures, with the target's exact
next-token laws (T = 1, no truncation):

- ``corpus``: P(<eos>) and the rank of ``<eos>`` (1 = most likely token) at every position of
  the 95-token contexts that end each training file (the prefixes up to and including the
  ``<eos>`` position, as the training windows saw them: ``<bos>`` + the tokens before), and of
  ``--random`` random training windows of the same length;
- ``tokens``: a greedy search over prompts: the best single token after ``<bos>`` for
  P(<eos>), then the best next token, ``--greedy-steps`` times (V forward rows per step);
- ``world``: the world's own prompts (``BPE_PROMPTS``, ``BPE_EOS_PROMPTS``);
- ``probe`` (``--probe``): can the ``<eos>`` logit be fixed without retraining? Refit the
  ``<eos>`` output embedding alone (unpenalised maximum likelihood, L-BFGS, the rest of the
  model frozen) on all scanned positions (random windows weighted up to the whole stream),
  then report P(<eos>) where the training files end (in-sample) and where the held-out files
  end. Unpenalised, this fit diverges (its row norm grows without bound) and counts the random
  windows' own ``<eos>`` twice; the refit of ``train_bpe`` fixes both (ridge chosen by
  cross-validation), so use this probe only as a quick look.

Prints the largest P(<eos>) and the best rank found, with the contexts. Measured numbers are
in docs/explanation/bpe-world.md (before the refit, the target never put more than ~7e-4 on ``<eos>``).

    python -m tools.training.bpe_eos --random 200 --greedy-steps 2 --probe
"""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def main(argv: list[str] | None = None) -> int:
    import torch

    from speceq.models.bpe import (
        BPE_BOS_ID,
        BPE_EOS_ID,
        BPE_EOS_PROMPTS,
        BPE_PROMPTS,
        BPE_VOCAB_SIZE,
        load_bpe_target,
        load_bpe_tokenizer,
    )
    from tools.training.bpe_corpus import encode_corpus

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--context", type=int, default=95, help="tokens before each <eos> (training windows: 95)")
    ap.add_argument("--random", type=int, default=200, help="random training windows scanned as a control")
    ap.add_argument("--greedy-steps", type=int, default=2, help="steps of the greedy token search (0: none)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--top", type=int, default=5, help="contexts printed")
    ap.add_argument("--probe", action="store_true", help="refit the <eos> output embedding alone (see above)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    start = time.perf_counter()
    tok = load_bpe_tokenizer()
    model = load_bpe_target().eval()
    corpus = encode_corpus(tok)
    stream = corpus.train
    E, L = BPE_EOS_ID, args.context
    ends = [e for e in (stream == E).nonzero()[:, 0].tolist() if e >= L]
    g = torch.Generator().manual_seed(args.seed)
    starts = torch.randint(0, stream.numel() - L - 1, (args.random,), generator=g).tolist()
    windows = [(True, stream[e - L:e + 1]) for e in ends] + [(False, stream[a:a + L + 1]) for a in starts]
    found: list[tuple[float, int, bool, str]] = []  # (P(eos), rank, file end?, context)
    at_end: list[float] = []
    W = model.get_output_embeddings().weight
    probe: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, bool]] = []  # (hidden, logsumexp without <eos>, is <eos>, end?)
    with torch.inference_mode():
        for i in range(0, len(windows), 4):  # 4 windows: ~100 MB per float64 copy of their laws
            part = windows[i:i + 4]
            ids = torch.stack([torch.cat([torch.tensor([BPE_BOS_ID]), w[:-1]]) for _, w in part])
            hidden = model.model(input_ids=ids).last_hidden_state
            logits = (hidden @ W.T).float()  # [b, L + 1, V]: after <bos> + w[:j]
            if args.probe:
                rest = logits.double()
                rest[..., E] = float("-inf")
                rest = torch.logsumexp(rest, -1)
                for b, (is_end, w) in enumerate(part):
                    probe.append((hidden[b].double(), rest[b], w == E, is_end))
            rank = 1 + (logits > logits[..., E:E + 1]).sum(-1)
            prob = torch.exp(logits[..., E].double() - torch.logsumexp(logits.double(), -1))
            for b, (is_end, w) in enumerate(part):
                if is_end:
                    at_end.append(float(prob[b, -1]))
                j = int(prob[b].argmax())
                found.append((float(prob[b, j]), int(rank[b, j]), is_end, tok.decode(w[:j].tolist())[-60:]))
    found.sort(key=lambda f: -f[0])
    report = {
        "files_ending_in_eos": len(ends), "random_windows": args.random,
        "p_eos_where_the_file_ends": {"max": max(at_end), "median": sorted(at_end)[len(at_end) // 2]},
        "p_eos_max_anywhere": found[0][0], "best_rank_anywhere": min(f[1] for f in found),
        "top": [{"p_eos": round(f[0], 6), "rank": f[1], "file_end_window": f[2], "context": f[3]} for f in found[:args.top]],
    }
    if args.probe:
        report["probe"], refit = _probe(probe, W[E].detach().double(), stream.numel(), len(ends), args.random * (L + 1))
        held = corpus.heldout
        held_ends = [e for e in (held == E).nonzero()[:, 0].tolist() if e >= L]
        with torch.inference_mode():
            ids = torch.stack([torch.cat([torch.tensor([BPE_BOS_ID]), held[e - L:e]]) for e in held_ends])
            hidden = model.model(input_ids=ids).last_hidden_state[:, -1].double()
            logits = hidden @ W.T.double()
            before = torch.exp(logits[:, E] - torch.logsumexp(logits, -1))
            logits[:, E] = hidden @ refit
            after = torch.exp(logits[:, E] - torch.logsumexp(logits, -1))
        report["probe"]["held_out_file_ends"] = {"files": len(held_ends), "p_eos_before": [round(float(x), 6) for x in before],
                                                 "p_eos_after_refit": [round(float(x), 6) for x in after]}
    prefix = [BPE_BOS_ID]
    greedy = []
    with torch.inference_mode():
        for _ in range(args.greedy_steps):
            best = (-1.0, -1)
            for lo in range(0, BPE_VOCAB_SIZE, 1024):
                xs = torch.arange(lo, min(BPE_VOCAB_SIZE, lo + 1024))
                ids = torch.cat([torch.tensor(prefix).expand(len(xs), -1), xs[:, None]], 1)
                hidden = model.model(input_ids=ids).last_hidden_state[:, -1]
                logits = (hidden @ W.T).double()
                p = torch.exp(logits[:, E] - torch.logsumexp(logits, -1))
                j = int(p.argmax())
                if float(p[j]) > best[0]:
                    best = (float(p[j]), int(xs[j]))
            prefix.append(best[1])
            greedy.append({"p_eos": round(best[0], 6), "prompt": tok.decode(prefix[1:])})
    report["greedy_token_search"] = greedy
    with torch.inference_mode():
        report["world_prompts"] = {
            p: round(float(torch.softmax(model(input_ids=torch.tensor([tok.encode(p).ids])).logits[0, -1].double(),
                                         -1)[E]), 6) for p in (*BPE_PROMPTS, *BPE_EOS_PROMPTS)}
    report["seconds"] = round(time.perf_counter() - start, 1)
    print(json.dumps(report, indent=2))
    return 0


def _probe(rows: list, start: torch.Tensor, stream_tokens: int, files: int, random_positions: int
           ) -> tuple[dict, torch.Tensor]:
    """Refit the <eos> embedding e on the scanned positions: maximise sum w log P(y | h) with P(<eos>) = sigmoid(h.e - Z)."""
    import torch

    H = torch.cat([r[0] for r in rows])
    Z = torch.cat([r[1] for r in rows])
    Y = torch.cat([r[2] for r in rows])
    end_window = torch.cat([torch.full((len(r[2]),), r[3]) for r in rows])
    # file-end windows: only their <eos> events count (once per file); random windows stand for the whole stream
    weight = torch.where(end_window, torch.where(Y, 1.0, 0.0), (stream_tokens - files) / random_positions).double()
    e = start.clone().requires_grad_(True)
    opt = torch.optim.LBFGS([e], max_iter=200, line_search_fn="strong_wolfe")

    def nll() -> torch.Tensor:
        opt.zero_grad()
        le = H @ e
        loss = -(weight * (torch.where(Y, le, Z) - torch.logaddexp(le, Z))).sum() / weight.sum()
        loss.backward()
        return loss

    for _ in range(3):
        opt.step(nll)
    with torch.no_grad():
        p = torch.sigmoid(H @ e - Z)
        at_eos = p[end_window & Y]
    return ({"p_eos_at_file_ends_after_refit": {"median": float(at_eos.median()), "max": float(at_eos.max())},
             "p_eos_mean_elsewhere_after_refit": float(p[~end_window].mean())}, e.detach())


if __name__ == "__main__":
    raise SystemExit(main())
