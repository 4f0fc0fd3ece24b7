"""GGUF files as a model source: conversion, the checksummed cache, the missing-extra error.

A tiny Llama (GQA, tied embeddings, like SmolLM2) is written as GGUF the way llama.cpp writes it
(Q/K rows permuted) and loaded back through the one loading seam, ``load_causal_lm``.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

from speceq.errors import ConfigError, MissingExtra
from speceq.models import model_cache
from speceq.models.gguf import converted_folder, gguf_file_of, resolve_model_folder
from speceq.models.hf_utils import describe_model, load_causal_lm, tiny_random_llama
from speceq.models.vocab import read_tokenizer

pytest.importorskip("gguf", reason="needs the gguf extra: pip install 'speceq[gguf]'")
pytest.importorskip("accelerate", reason="needs the gguf extra: pip install 'speceq[gguf]'")

from gguf_support import EOS_ID, PAD_ID, VOCAB_SIZE, write_tiny_gguf  # noqa: E402

INPUT = torch.tensor([[72, 101, 108, 108, 111, 256, 44, 32, 119, 258]])


@pytest.fixture(scope="module")
def tiny() -> torch.nn.Module:
    return tiny_random_llama(0, hidden_size=32, layers=3, heads=4, kv_heads=2, vocab_size=VOCAB_SIZE,
                             eos_token_id=EOS_ID, pad_token_id=PAD_ID, tie_word_embeddings=True, init_std=0.3)


@pytest.fixture(scope="module")
def tiny_gguf(tiny: torch.nn.Module, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tiny, tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv(model_cache.CACHE_ENV, str(root))
    monkeypatch.setattr(model_cache, "_verified", set())  # every test re-checks checksums
    return root


def test_gguf_loads_through_the_seam_with_identical_logits(tiny, tiny_gguf: Path, cache: Path) -> None:
    loaded = load_causal_lm(tiny_gguf, role="target")
    assert type(loaded).__name__ == "LlamaForCausalLM"
    assert loaded.config.num_key_value_heads == 2 and loaded.config.tie_word_embeddings
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight
    with torch.inference_mode():
        assert torch.equal(loaded(INPUT).logits, tiny(INPUT).logits)  # F32 tensors: exact, Q/K un-permuted
    folder = Path(loaded.config._name_or_path)
    assert folder.parent == cache / "models" and folder.name.startswith("gguf-")
    described = describe_model(loaded)
    assert described["source"]["gguf"] == str(tiny_gguf) and described["source"]["gguf_sha256"] in folder.name
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config  # vLLM refuses a folder that names the gguf method
    vocab = read_tokenizer(folder)  # the tokenizer next to the weights: what the engines read EOS from
    assert (vocab.vocab_size, vocab.eos_token_id, vocab.pad_token_id) == (VOCAB_SIZE, EOS_ID, PAD_ID)
    assert "<|im_start|>" in (folder / "chat_template.jinja").read_text()


def test_a_folder_holding_one_gguf_file_is_a_model_source(tiny_gguf: Path, tmp_path: Path, cache: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    shutil.copy(tiny_gguf, folder / "tiny.gguf")
    assert gguf_file_of(folder) == folder / "tiny.gguf"
    resolved, source = resolve_model_folder(folder)
    assert source["gguf"] == str(folder / "tiny.gguf") and (resolved / "model.safetensors").is_file()
    shutil.copy(tiny_gguf, folder / "other.gguf")
    with pytest.raises(ConfigError, match="several GGUF files .*other.gguf, tiny.gguf"):
        gguf_file_of(folder)
    (folder / "config.json").write_text("{}")  # a Hugging Face folder: GGUF files beside it are not the model
    assert gguf_file_of(folder) is None
    with pytest.raises(ConfigError, match="GGUF file does not exist"):
        gguf_file_of(tmp_path / "missing.gguf")


def test_second_load_is_a_cache_hit(tiny_gguf: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = converted_folder(tiny_gguf)
    assert first.built
    from speceq.models import gguf as gguf_module

    def no_conversion(*args: object, **kwargs: object) -> None:
        raise AssertionError("converted again although the cache holds a valid folder")

    monkeypatch.setattr(gguf_module, "convert_gguf", no_conversion)
    monkeypatch.setattr(model_cache, "_verified", set())
    second = converted_folder(tiny_gguf)
    assert not second.built and second.path == first.path
    load_causal_lm(tiny_gguf, role="target")


@pytest.mark.parametrize("damage", ["flip a byte", "truncate", "drop the manifest", "unlisted file"])
def test_a_damaged_cache_is_detected_and_rebuilt(tiny, tiny_gguf: Path, cache: Path, damage: str) -> None:
    folder = converted_folder(tiny_gguf).path
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    if damage == "flip a byte":
        data[-5] ^= 0xFF  # inside the last tensor's data: the size is unchanged
        weights.write_bytes(bytes(data))
    elif damage == "truncate":
        weights.write_bytes(bytes(data[: len(data) // 2]))
    elif damage == "drop the manifest":
        (folder / model_cache.MANIFEST_NAME).unlink()
    else:
        (folder / "stray.bin").write_bytes(b"x")
    model_cache._verified.clear()
    assert not model_cache.check_folder(folder).ok
    again = converted_folder(tiny_gguf)
    assert again.built and again.rebuilt_because
    assert model_cache.check_folder(folder).ok
    with torch.inference_mode():
        assert torch.equal(load_causal_lm(tiny_gguf, role="target")(INPUT).logits, tiny(INPUT).logits)
    assert not [p for p in folder.parent.iterdir() if p.name.endswith((".tmp", ".old"))]  # nothing left behind


def test_a_failed_conversion_leaves_no_folder(tmp_path: Path, cache: Path) -> None:
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 60)
    with pytest.raises((ConfigError, ValueError)):
        converted_folder(bad)
    models = cache / "models"
    assert not [p for p in models.iterdir() if not p.name.endswith(".lock")]


def test_missing_extra_names_the_install_command(tiny_gguf: Path, cache: Path, monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "gguf", None)  # `import gguf` now raises ImportError
    with pytest.raises(MissingExtra, match=r"needs the package\(s\) gguf: .*pip install 'speceq\[gguf\]'"):
        load_causal_lm(tiny_gguf, role="target")
    # a plain Hugging Face folder still loads without the extra
    plain = tmp_path / "plain"
    tiny_random_llama(0).save_pretrained(plain)
    assert load_causal_lm(plain, role="target").config.vocab_size == 259
