"""Train the bundled target and draft, reproducibly, then measure them.

``python -m tools.training.train`` trains the target (next-byte cross-entropy on the
standard-library corpus of :mod:`tools.training.data`), then distils the draft from it
(per-token KL(p_target || q_draft) on the same kind of windows), writes both model folders
(``config.json``, ``model.safetensors`` in fp32, ``generation_config.json``, tokenizer files)
and ``metrics.json``, and prints the metrics table. Fixed seeds, a sorted file list and
one thread by default make a rerun on the same machine reproduce the same weights.
``--measure-only`` recomputes ``metrics.json`` from the saved folders. ``--draft-hd32``
distils only the vLLM draft (2 heads of 32, ``draft-hd32/``) from the saved target and
records its metrics under ``draft_hd32`` in ``metrics.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from speceq.errors import ConfigError
from speceq.models import DRAFT_DIR, METRICS_PATH, TARGET_DIR, load_model
from speceq.models.tokenizer import BOS_ID, EOS_ID, PAD_ID, write_hf_tokenizer

if TYPE_CHECKING:
    import torch
    import transformers


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainSettings:
    """Hyper-parameters of one training run (recorded in ``metrics.json``)."""

    seed: int = 0
    target_steps: int = 400
    draft_steps: int = 500
    batch: int = 16
    seq_len: int = 256
    target_lr: float = 3e-3
    draft_lr: float = 5e-3
    warmup_steps: int = 20
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    threads: int = 1


def lr_factor(step: int, total: int, warmup: int, min_ratio: float) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine decay to ``min_ratio``."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def _optimise(
    model: transformers.PreTrainedModel,
    loss_fn: Callable[[torch.Tensor], torch.Tensor],
    stream: torch.Tensor,
    steps: int,
    lr: float,
    settings: TrainSettings,
    generator: torch.Generator,
    label: str,
    bos_id: int = BOS_ID,
) -> list[float]:
    """AdamW with warm-up + cosine schedule and gradient clipping; returns the loss per step."""
    import torch

    from tools.training.data import random_windows

    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=settings.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_factor(s, steps, settings.warmup_steps, settings.min_lr_ratio)
    )
    losses: list[float] = []
    started = time.perf_counter()
    for step in range(steps):
        windows = random_windows(stream, settings.batch, settings.seq_len, generator, bos_id=bos_id)
        loss = loss_fn(windows)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), settings.grad_clip)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        if (step + 1) % 50 == 0 or step + 1 == steps:
            recent = sum(losses[-50:]) / len(losses[-50:])
            elapsed = time.perf_counter() - started
            print(f"  {label} step {step + 1:>4}/{steps}  loss {recent:.3f}  {elapsed:6.1f} s", file=sys.stderr)
    model.eval()
    model.requires_grad_(False)
    return losses


def train_target(
    stream: torch.Tensor,
    settings: TrainSettings,
    *,
    config: transformers.LlamaConfig | None = None,
    bos_id: int = BOS_ID,
) -> tuple[transformers.PreTrainedModel, list[float]]:
    """Train the target on next-token cross-entropy (``config`` defaults to the byte target's)."""
    import torch
    from transformers import LlamaForCausalLM

    from tools.training.architecture import target_config

    torch.manual_seed(settings.seed)
    model = LlamaForCausalLM(config if config is not None else target_config())
    generator = torch.Generator().manual_seed(settings.seed)

    def loss_fn(windows: torch.Tensor) -> torch.Tensor:
        return model(input_ids=windows, labels=windows).loss

    return model, _optimise(
        model, loss_fn, stream, settings.target_steps, settings.target_lr, settings, generator, "target", bos_id
    )


def distil_draft(
    target: transformers.PreTrainedModel,
    stream: torch.Tensor,
    settings: TrainSettings,
    *,
    hd32: bool = False,
    config: transformers.LlamaConfig | None = None,
    bos_id: int = BOS_ID,
) -> tuple[transformers.PreTrainedModel, list[float]]:
    """Distil the draft from the target: minimise the mean per-token KL(p_target || q_draft).

    ``hd32``: the vLLM layout (:func:`~tools.training.architecture.draft_hd32_config`), own seed.
    ``config``: another draft shape (the BPE world's); ``bos_id`` starts each training window.
    """
    import torch
    from transformers import LlamaForCausalLM

    from tools.training.architecture import draft_config, draft_hd32_config

    seed = settings.seed + (2 if hd32 else 1)
    torch.manual_seed(seed)
    if config is None:
        config = draft_hd32_config() if hd32 else draft_config()
    model = LlamaForCausalLM(config)
    generator = torch.Generator().manual_seed(seed)

    def loss_fn(windows: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            target_logp = torch.log_softmax(target(input_ids=windows).logits, dim=-1)
        draft_logp = torch.log_softmax(model(input_ids=windows).logits, dim=-1)
        return (target_logp.exp() * (target_logp - draft_logp)).sum(-1).mean()

    label = "draft-hd32" if hd32 else "draft"
    return model, _optimise(
        model, loss_fn, stream, settings.draft_steps, settings.draft_lr, settings, generator, label, bos_id
    )


def save_model(model: transformers.PreTrainedModel, folder: Path) -> None:
    """Write the model folder: fp32 safetensors, config, generation config, tokenizer files."""
    from transformers import GenerationConfig

    folder.mkdir(parents=True, exist_ok=True)
    model.generation_config = GenerationConfig(bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID)
    model.save_pretrained(folder)
    write_hf_tokenizer(folder)
    if not (folder / "model.safetensors").is_file():
        raise ConfigError("save_pretrained did not write model.safetensors", where=str(folder))


def _versions() -> dict[str, str]:
    import tokenizers
    import torch
    import transformers

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
    }


def measure_folders(target_dir: Path, draft_dir: Path, seed: int) -> dict[str, Any]:
    """Load both saved folders and measure them (and the target's random initialisation)."""
    import torch
    from transformers import LlamaForCausalLM

    from tools.training.architecture import target_config
    from tools.training.data import load_corpus
    from tools.training.metrics import measure

    corpus = load_corpus()
    torch.manual_seed(seed)  # the same initial weights train_target starts from
    random_init = LlamaForCausalLM(target_config()).eval()
    target, draft = load_model(target_dir), load_model(draft_dir)
    result = measure(target, draft, corpus.heldout, random_init=random_init)
    result["corpus"] = {"root": corpus.root, "files": corpus.n_files, "sha256": corpus.sha256,
                        "train_tokens": int(corpus.train.numel()), "heldout_tokens": int(corpus.heldout.numel())}
    result["params"] = {"target": sum(p.numel() for p in target.parameters()),
                        "draft": sum(p.numel() for p in draft.parameters())}
    result["versions"] = _versions()
    return result


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    defaults = TrainSettings()
    ap = argparse.ArgumentParser(prog="python -m tools.training.train", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None,
                    help="folder to write target/, draft/ and metrics.json into. Default: the packaged harness/models/")
    ap.add_argument("--steps", type=int, default=defaults.target_steps, help="target training steps. Default: %(default)r")
    ap.add_argument("--draft-steps", type=int, default=defaults.draft_steps,
                    help="draft distillation steps. Default: %(default)r")
    ap.add_argument("--seed", type=int, default=defaults.seed, help="seed of weights and data order. Default: %(default)r")
    ap.add_argument("--threads", type=int, default=defaults.threads, help="torch CPU threads. Default: %(default)r")
    ap.add_argument("--measure-only", action="store_true", help="only recompute metrics.json from the saved folders")
    ap.add_argument("--draft-hd32", action="store_true",
                    help="only distil the vLLM draft (2 heads of 32) from the saved target into draft-hd32/")
    args = ap.parse_args(argv)
    for name in ("steps", "draft_steps", "threads"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    import torch

    args = _parse(argv)
    torch.set_num_threads(args.threads)
    if args.out is None:
        target_dir, draft_dir, metrics_path = TARGET_DIR, DRAFT_DIR, METRICS_PATH
    else:
        target_dir, draft_dir, metrics_path = args.out / "target", args.out / "draft", args.out / "metrics.json"
    if args.draft_hd32:
        return _distil_hd32(args, target_dir, metrics_path)
    training: dict[str, Any] | None = None
    hd32_run: tuple[float | None, float | None] = (None, None)
    settings = TrainSettings(seed=args.seed, threads=args.threads)
    if args.measure_only:
        if metrics_path.is_file():
            training = json.loads(metrics_path.read_text(encoding="utf-8")).get("training")
        seed = training["settings"]["seed"] if training else args.seed
    else:
        from tools.training.data import load_corpus

        settings = TrainSettings(seed=args.seed, target_steps=args.steps, draft_steps=args.draft_steps, threads=args.threads)
        corpus = load_corpus()
        started = time.perf_counter()
        target, target_losses = train_target(corpus.train, settings)
        target_s = time.perf_counter() - started
        draft, draft_losses = distil_draft(target, corpus.train, settings)
        draft_s = time.perf_counter() - started - target_s
        save_model(target, target_dir)
        save_model(draft, draft_dir)
        started_hd32 = time.perf_counter()
        hd32, hd32_losses = distil_draft(target, corpus.train, settings, hd32=True)
        hd32_run = (round(time.perf_counter() - started_hd32, 1), round(sum(hd32_losses[-20:]) / 20, 4)
                    if len(hd32_losses) >= 20 else hd32_losses[-1])
        save_model(hd32, target_dir.parent / "draft-hd32")
        training = {
            "settings": asdict(settings),
            "draft_method": "distilled from the target: per-token KL(p_target || q_draft)",
            "target_seconds": round(target_s, 1),
            "draft_seconds": round(draft_s, 1),
            "target_final_loss": round(sum(target_losses[-20:]) / 20, 4) if len(target_losses) >= 20 else target_losses[-1],
            "draft_final_kl": round(sum(draft_losses[-20:]) / 20, 4) if len(draft_losses) >= 20 else draft_losses[-1],
        }
        seed = settings.seed
    metrics = measure_folders(target_dir, draft_dir, seed)
    from tools.training.metrics import format_table

    metrics_path.parent.mkdir(parents=True, exist_ok=True)
    kept = {}  # --measure-only keeps the vLLM draft's training numbers
    if args.measure_only and metrics_path.is_file():
        kept = {k: v for k, v in json.loads(metrics_path.read_text(encoding="utf-8")).items() if k == "draft_hd32"}
    metrics_path.write_text(json.dumps({"training": training, **metrics, **kept}, indent=2) + "\n", encoding="utf-8")
    if (target_dir.parent / "draft-hd32").is_dir():
        _measure_hd32(target_dir, metrics_path, settings, *hd32_run)
    print(format_table(metrics))
    if training:
        print(f"training: target {training['target_seconds']} s, draft {training['draft_seconds']} s "
              f"({training['settings']['threads']} thread(s)); wrote {metrics_path}")
    return 0


def _distil_hd32(args: argparse.Namespace, target_dir: Path, metrics_path: Path) -> int:
    """``--draft-hd32``: distil the vLLM draft from the saved target; record it under ``draft_hd32``."""
    from tools.training.data import load_corpus

    if not metrics_path.is_file():
        raise ConfigError("train the target and draft first (no metrics.json)", where=str(metrics_path))
    settings = TrainSettings(seed=args.seed, draft_steps=args.draft_steps, threads=args.threads)
    corpus = load_corpus()
    started = time.perf_counter()
    draft, losses = distil_draft(load_model(target_dir), corpus.train, settings, hd32=True)
    seconds = time.perf_counter() - started
    save_model(draft, target_dir.parent / "draft-hd32")
    _measure_hd32(target_dir, metrics_path, settings, round(seconds, 1),
                  round(sum(losses[-20:]) / 20, 4) if len(losses) >= 20 else losses[-1])
    return 0


def _measure_hd32(target_dir: Path, metrics_path: Path, settings: TrainSettings, seconds: float | None,
                  final_kl: float | None) -> None:
    """Measure draft-hd32/ against the target into ``metrics.json``'s ``draft_hd32`` (keeps known training numbers)."""
    from tools.training.data import load_corpus
    from tools.training.metrics import measure

    draft = load_model(target_dir.parent / "draft-hd32")
    measured = measure(load_model(target_dir), draft, load_corpus().heldout)
    metrics = json.loads(metrics_path.read_text(encoding="utf-8"))
    old = metrics.get("draft_hd32", {})
    metrics["draft_hd32"] = {
        "settings": old.get("settings", asdict(settings)) if seconds is None else asdict(settings),
        "seconds": old.get("seconds") if seconds is None else seconds,
        "final_kl": old.get("final_kl") if final_kl is None else final_kl,
        "model": measured["models"]["draft"], "acceptance": measured["acceptance"],
        "greedy_agreement": measured["greedy_agreement"], "params": sum(p.numel() for p in draft.parameters()),
    }
    metrics_path.write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
    print("draft-hd32: " + json.dumps(metrics["draft_hd32"]))


if __name__ == "__main__":
    raise SystemExit(main())
