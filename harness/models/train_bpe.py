"""Train the BPE world reproducibly: tokenizer, target, distilled draft, then measure them.

``python -m speceq.models.train_bpe`` trains the 32 000-token byte-level BPE tokenizer on the
training files of :mod:`speceq.models.bpe`, the target on next-token cross-entropy, distils
the draft from it (per-token KL(p_target || q_draft)) with the same optimiser as the byte
models (:mod:`speceq.models.train`), writes ``bpe-target/`` and ``bpe-draft/`` (fp16
safetensors with tied embeddings, config, generation config, tokenizer files) and
``bpe-metrics.json``, and prints the metrics table. Fixed seeds and one thread make a rerun
on the same machine reproduce the same weights. ``--measure-only`` recomputes the metrics.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from speceq.errors import ConfigError
from speceq.models import load_model
from speceq.models.bpe import (
    BPE_BOS_ID,
    BPE_DRAFT_DIR,
    BPE_EOS_ID,
    BPE_METRICS_PATH,
    BPE_PAD_ID,
    BPE_TARGET_DIR,
    bpe_draft_config,
    bpe_target_config,
    encode_corpus,
    load_bpe_tokenizer,
    split_files,
    train_tokenizer,
    write_tokenizer_files,
)
from speceq.models.train import TrainSettings, _versions, distil_draft, train_target

if TYPE_CHECKING:
    import tokenizers
    import transformers

#: BPE training defaults: shorter windows (a token is ~3.5 bytes), fewer steps (V = 32k costs).
BPE_SETTINGS = TrainSettings(
    seed=0, target_steps=200, draft_steps=60, batch=8, seq_len=96, target_lr=5e-3, draft_lr=6e-3, warmup_steps=15
)
#: Evaluation slice: 32 windows of 128 tokens (32 x 128 x 32 000 float32 logits = 0.5 GB).
BPE_EVAL_WINDOWS = 32


def save_bpe_model(model: transformers.PreTrainedModel, tok: tokenizers.Tokenizer, folder: Path) -> None:
    """Write the folder: fp16 safetensors (tied embeddings stored once), configs, tokenizer."""
    import torch
    from transformers import GenerationConfig

    folder.mkdir(parents=True, exist_ok=True)
    model.generation_config = GenerationConfig(bos_token_id=BPE_BOS_ID, eos_token_id=BPE_EOS_ID, pad_token_id=BPE_PAD_ID)
    model.to(torch.float16).save_pretrained(folder)
    model.to(torch.float32)
    write_tokenizer_files(tok, folder)
    if not (folder / "model.safetensors").is_file():
        raise ConfigError("save_pretrained did not write model.safetensors", where=str(folder))


def measure_bpe(target_dir: Path, draft_dir: Path, seed: int) -> dict[str, Any]:
    """Load both saved folders and measure them (and the target's random initialisation)."""
    import torch
    from transformers import LlamaForCausalLM

    from speceq.models.metrics import measure

    tok = load_bpe_tokenizer(target_dir)
    corpus = encode_corpus(tok)
    torch.manual_seed(seed)
    random_init = LlamaForCausalLM(bpe_target_config()).eval()
    target, draft = load_model(target_dir), load_model(draft_dir)
    result = measure(target, draft, corpus.heldout, random_init=random_init, n_windows=BPE_EVAL_WINDOWS,
                     bos_id=BPE_BOS_ID, eos_id=BPE_EOS_ID)
    heldout_bytes = sum(f.stat().st_size for f in split_files()[1])
    result["corpus"] = {"root": corpus.root, "train_files": corpus.n_train_files,
                        "heldout_files": corpus.n_heldout_files, "sha256": corpus.sha256,
                        "train_tokens": int(corpus.train.numel()), "heldout_tokens": int(corpus.heldout.numel()),
                        "heldout_bytes_per_token": round(heldout_bytes / corpus.heldout.numel(), 3)}
    result["params"] = {"target": sum(p.numel() for p in target.parameters()),
                        "draft": sum(p.numel() for p in draft.parameters())}
    result["vocab_size"] = tok.get_vocab_size()
    result["eos_mass"] = eos_mass(target, tok)
    result["versions"] = _versions()
    return result


def _tail(xs: list[float]) -> float:
    return round(sum(xs[-20:]) / len(xs[-20:]), 4)


def _distil_saved(target_dir: Path, draft_dir: Path, tok: tokenizers.Tokenizer, corpus: Any,
                  settings: TrainSettings) -> dict[str, Any]:
    """Distil the draft from the SAVED (fp16-rounded) target, so --draft-only reproduces a full run."""
    started = time.perf_counter()
    target = load_model(target_dir)
    draft, losses = distil_draft(target, corpus.train, settings, config=bpe_draft_config(), bos_id=BPE_BOS_ID)
    seconds = time.perf_counter() - started
    save_bpe_model(draft, tok, draft_dir)
    return {"draft_method": "distilled from the saved target: per-token KL(p_target || q_draft)",
            "draft_seconds": round(seconds, 1), "draft_final_kl": _tail(losses)}


def eos_mass(target: transformers.PreTrainedModel, tok: tokenizers.Tokenizer) -> dict[str, float]:
    """The target's probability of ``<eos>`` as the first generated token (T = 1) after each world prompt."""
    import torch

    from speceq.models.bpe import BPE_EOS_PROMPTS, BPE_PROMPTS

    out = {}
    with torch.no_grad():
        for prompt in (*BPE_PROMPTS, *BPE_EOS_PROMPTS):
            logits = target(input_ids=torch.tensor([tok.encode(prompt).ids])).logits[0, -1]
            out[prompt] = round(float(torch.softmax(logits.double(), -1)[BPE_EOS_ID]), 5)
    return out


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    d = BPE_SETTINGS
    ap = argparse.ArgumentParser(prog="python -m speceq.models.train_bpe", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None,
                    help="folder to write bpe-target/, bpe-draft/, bpe-metrics.json into. Default: harness/models/")
    ap.add_argument("--steps", type=int, default=d.target_steps, help="target training steps. Default: %(default)r")
    ap.add_argument("--draft-steps", type=int, default=d.draft_steps, help="draft distillation steps. Default: %(default)r")
    ap.add_argument("--seed", type=int, default=d.seed, help="seed of weights and data order. Default: %(default)r")
    ap.add_argument("--threads", type=int, default=d.threads, help="torch CPU threads. Default: %(default)r")
    ap.add_argument("--measure-only", action="store_true", help="only recompute bpe-metrics.json")
    ap.add_argument("--draft-only", action="store_true",
                    help="only distil the draft from the saved bpe-target/ (keeps the recorded target training)")
    args = ap.parse_args(argv)
    for name in ("steps", "draft_steps", "threads"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    import dataclasses

    import torch

    args = _parse(argv)
    torch.set_num_threads(args.threads)
    out = args.out
    target_dir = BPE_TARGET_DIR if out is None else out / "bpe-target"
    draft_dir = BPE_DRAFT_DIR if out is None else out / "bpe-draft"
    metrics_path = BPE_METRICS_PATH if out is None else out / "bpe-metrics.json"
    settings = dataclasses.replace(BPE_SETTINGS, seed=args.seed, target_steps=args.steps,
                                   draft_steps=args.draft_steps, threads=args.threads)
    training: dict[str, Any] | None = None
    if args.measure_only or args.draft_only:
        if metrics_path.is_file():
            training = json.loads(metrics_path.read_text(encoding="utf-8")).get("training")
    if args.draft_only:
        tok = load_bpe_tokenizer(target_dir)
        corpus = encode_corpus(tok)
        training = dict(training or {})
        training["settings"] = {**training.get("settings", asdict(settings)), "draft_steps": settings.draft_steps}
        training.update(_distil_saved(target_dir, draft_dir, tok, corpus, settings))
    elif not args.measure_only:
        started = time.perf_counter()
        tok = train_tokenizer(split_files()[0])
        tokenizer_s = time.perf_counter() - started
        print(f"  tokenizer: {tok.get_vocab_size()} tokens in {tokenizer_s:.1f} s", file=sys.stderr)
        corpus = encode_corpus(tok)
        started = time.perf_counter()
        target, target_losses = train_target(corpus.train, settings, config=bpe_target_config(), bos_id=BPE_BOS_ID)
        target_s = time.perf_counter() - started
        save_bpe_model(target, tok, target_dir)
        training = {
            "settings": asdict(settings),
            "weights_dtype": "float16 (loaded as float32)",
            "tokenizer_seconds": round(tokenizer_s, 1),
            "target_seconds": round(target_s, 1),
            "target_final_loss": _tail(target_losses),
        }
        training.update(_distil_saved(target_dir, draft_dir, tok, corpus, settings))
    seed = training["settings"]["seed"] if training else args.seed
    metrics = measure_bpe(target_dir, draft_dir, seed)
    from speceq.models.metrics import format_table

    metrics_path.parent.mkdir(parents=True, exist_ok=True)
    metrics_path.write_text(json.dumps({"training": training, **metrics}, indent=2) + "\n", encoding="utf-8")
    print(format_table(metrics))
    if training:
        print(f"training: tokenizer {training.get('tokenizer_seconds')} s, target {training.get('target_seconds')} s, "
              f"draft {training.get('draft_seconds')} s ({settings.threads} thread(s)); wrote {metrics_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
