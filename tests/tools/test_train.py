"""The training script: schedule, reproducibility, and a tiny end-to-end run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from speceq.models import load_model
from tools.training.train import TrainSettings, distil_draft, lr_factor, main, train_target

TINY = TrainSettings(seed=7, target_steps=3, draft_steps=3, batch=2, seq_len=24, warmup_steps=2)


def test_lr_schedule() -> None:
    assert lr_factor(0, 100, 10, 0.1) == pytest.approx(0.1)
    assert lr_factor(9, 100, 10, 0.1) == pytest.approx(1.0)
    assert lr_factor(10, 100, 10, 0.1) == pytest.approx(1.0)
    assert lr_factor(100, 100, 10, 0.1) == pytest.approx(0.1)
    values = [lr_factor(s, 100, 10, 0.1) for s in range(10, 101)]
    assert all(a >= b for a, b in zip(values, values[1:]))


def test_training_is_reproducible_and_changes_weights() -> None:
    stream = torch.randint(0, 256, (5000,), generator=torch.Generator().manual_seed(0))
    torch.set_num_threads(1)
    t1, losses1 = train_target(stream, TINY)
    t2, losses2 = train_target(stream, TINY)
    assert losses1 == losses2 and len(losses1) == 3
    for a, b in zip(t1.state_dict().values(), t2.state_dict().values()):
        assert torch.equal(a, b)
    torch.manual_seed(TINY.seed)
    t0 = type(t1)(t1.config)  # the initial weights train_target started from
    moved = [not torch.equal(a, b) for a, b in zip(t0.state_dict().values(), t1.state_dict().values())]
    assert any(moved)
    d1, kl1 = distil_draft(t1, stream, TINY)
    d2, kl2 = distil_draft(t1, stream, TINY)
    assert kl1 == kl2 and all(k >= 0 for k in kl1)
    assert not d1.training and not any(p.requires_grad for p in d1.parameters())


def test_cli_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--out", str(tmp_path), "--steps", "2", "--draft-steps", "2", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "held-out loss" in out and "acceptance" in out
    for name in ("target", "draft", "draft-hd32"):
        folder = tmp_path / name
        for f in ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
            assert (folder / f).is_file(), f"{name}/{f}"
        assert load_model(folder).config.vocab_size == 259
    metrics = json.loads((tmp_path / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["training"]["settings"]["target_steps"] == 2
    assert metrics["training"]["settings"]["seed"] == 3
    assert set(metrics["acceptance"]) == {"T=1", "T=0.7"}
    assert set(metrics["models"]) == {"target", "draft", "random_init_target"}
    # after two steps the target is still close to its random initialisation: loss near ln(259)
    assert metrics["models"]["target"]["heldout_loss"] > 4.0
    before = metrics["models"]["target"]

    assert main(["--out", str(tmp_path), "--measure-only"]) == 0
    again = json.loads((tmp_path / "metrics.json").read_text(encoding="utf-8"))
    assert again["training"] == metrics["training"]
    assert again["models"]["target"] == pytest.approx(before)
    # the vLLM draft (2 heads of 32): trained with the others, its numbers kept by --measure-only
    assert load_model(tmp_path / "draft-hd32").config.head_dim == 32
    hd32 = metrics["draft_hd32"]
    assert hd32["settings"]["draft_steps"] == 2 and hd32["seconds"] is not None and hd32["final_kl"] >= 0
    assert again["draft_hd32"]["seconds"] == hd32["seconds"] and again["draft_hd32"]["final_kl"] == hd32["final_kl"]

    # --draft-hd32 alone: redistils only that draft from the saved target
    assert main(["--out", str(tmp_path), "--draft-hd32", "--draft-steps", "3"]) == 0
    third = json.loads((tmp_path / "metrics.json").read_text(encoding="utf-8"))
    assert third["draft_hd32"]["settings"]["draft_steps"] == 3 and third["training"] == metrics["training"]


def test_cli_rejects_bad_counts(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--steps", "0"])
    assert exc.value.code == 2
    assert "--steps must be >= 1" in capsys.readouterr().err
