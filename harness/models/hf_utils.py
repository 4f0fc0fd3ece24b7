"""Loading and describing Hugging Face causal LMs: used by the project's own engines, the oracle,
the calibration, benchmarks and tests.

A model is given as ``None`` (the bundled target or draft), a folder path, a GGUF file (or a
folder holding one, converted once into a cached folder: :mod:`speceq.models.gguf`), or an
already loaded ``PreTrainedModel``. Loading is offline (local files only).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Literal

import torch

from speceq.errors import ConfigError
from speceq.models.torch_utils import first_eos_id, resolve_dtype


def load_causal_lm(
    model: str | Path | Any | None,
    *,
    role: Literal["target", "draft"],
    device: str | torch.device = "cpu",
    dtype: str | torch.dtype = "float32",
) -> Any:
    """Return an eval-mode causal LM on ``device`` in ``dtype``.

    ``None`` loads the bundled model of ``role``; a string or Path loads that local folder, or
    the cached converted folder of a ``.gguf`` file (or of a folder holding one; the model then
    carries ``speceq_source`` = where it came from, which :func:`describe_model` reports);
    a loaded model is moved to ``device``/``dtype`` and put in eval mode (not copied).
    """
    torch_dtype = resolve_dtype(dtype)
    if model is None:
        from speceq import models

        loader = models.load_target if role == "target" else models.load_draft
        return loader(dtype=torch_dtype, device=device)
    if isinstance(model, (str, Path)):
        from speceq.models import load_model
        from speceq.models.gguf import resolve_model_folder

        folder, source = resolve_model_folder(model)
        loaded = load_model(folder, dtype=torch_dtype, device=device)
        if source:
            loaded.speceq_source = source
        return loaded
    if not (isinstance(model, torch.nn.Module) and hasattr(model, "config")):
        raise ConfigError(
            f"expected None, a model folder or a transformers PreTrainedModel, got {type(model).__name__}", where=role
        )
    model = model.to(device=device, dtype=torch_dtype)
    model.eval()
    model.requires_grad_(False)
    return model


def model_in_dtype(model: Any | None, dtype: str | torch.dtype) -> Any | None:
    """``model`` itself when it already runs in ``dtype``, else a deep copy (paths and None pass through).

    For a second user of a loaded model (the oracle): it may cast its copy, never the engine's.
    """
    if model is None or isinstance(model, (str, Path)):
        return model
    return model if getattr(model, "dtype", None) == resolve_dtype(dtype) else copy.deepcopy(model)


def model_vocab_size(model: Any) -> int:
    """Number of logits the model emits per position (its output vocabulary)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None and hasattr(head, "out_features"):
        return int(head.out_features)
    return int(model.config.vocab_size)


def model_eos_source(model: Any, override: int | None) -> tuple[int | None, str]:
    """(EOS id, where it came from): ``override``, else the model's ``generation_config``, else its
    ``config``, else the tokenizer stored next to the weights; ``(None, "none")`` when nothing has one.
    """
    if override is not None:
        return int(override), "option"
    gen = getattr(model, "generation_config", None)
    for source, cfg in (("generation_config", gen), ("model config", getattr(model, "config", None))):
        eos = first_eos_id(cfg) if cfg is not None else None
        if eos is not None:
            return eos, source
    from speceq.models.vocab import model_folder_tokenizer

    tok = model_folder_tokenizer(model)
    if tok is not None and tok.eos_token_id is not None:
        return tok.eos_token_id, "tokenizer"
    return None, "none"


def model_eos_id(model: Any, override: int | None) -> int | None:
    """EOS id: ``override`` when given, else the model's (see :func:`model_eos_source`)."""
    return model_eos_source(model, override)[0]


def model_pad_id(model: Any) -> int:
    """A token id to put in padded slots (masked out, so any valid id works): the config's or
    generation config's pad id, else the tokenizer's, else EOS, else 0."""
    for cfg in (getattr(model, "config", None), getattr(model, "generation_config", None)):
        pad = getattr(cfg, "pad_token_id", None)
        if isinstance(pad, (list, tuple)):
            pad = pad[0] if pad else None
        if isinstance(pad, int) and not isinstance(pad, bool):
            return int(pad)
    from speceq.models.vocab import model_folder_tokenizer

    tok = model_folder_tokenizer(model)
    if tok is not None and tok.pad_token_id is not None:
        return tok.pad_token_id
    eos = model_eos_id(model, None)
    return eos if eos is not None else 0


def describe_model(model: Any) -> dict[str, Any]:
    """JSON-able provenance of a model: path, class, parameter count, dtype, device (and ``source``
    when it was converted from a GGUF file)."""
    param = next(model.parameters())
    out = {
        "path": str(getattr(model.config, "_name_or_path", "") or getattr(model, "name_or_path", "")) or None,
        "class": type(model).__name__,
        "parameters": int(sum(p.numel() for p in model.parameters())),
        "dtype": str(param.dtype).removeprefix("torch."),
        "device": str(param.device),
        "vocab_size": model_vocab_size(model),
    }
    source = getattr(model, "speceq_source", None)
    if isinstance(source, dict) and source:
        out["source"] = dict(source)
    return out


def tiny_random_llama(
    seed: int = 0,
    *,
    hidden_size: int = 32,
    layers: int = 2,
    heads: int = 4,
    init_std: float = 0.02,
    vocab_size: int = 259,
    eos_token_id: int = 257,
    pad_token_id: int = 258,
    kv_heads: int | None = None,
    tie_word_embeddings: bool = False,
) -> Any:
    """A tiny random-init ``LlamaForCausalLM`` (eval mode, float32) for tests and demos.

    The bundled byte vocabulary by default (259 ids, EOS 257, PAD 258). ``init_std`` scales
    the initial weights: larger values give peakier (lower-entropy) next-token laws.
    ``kv_heads`` (default ``heads // 2``) sets grouped-query attention; ``tie_word_embeddings``
    shares the embedding matrix with the head (as SmolLM2 does).
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads if kv_heads is not None else max(1, heads // 2),
        max_position_embeddings=512,
        initializer_range=init_std,
        bos_token_id=256,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
        tie_word_embeddings=tie_word_embeddings,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.eval()
    model.requires_grad_(False)
    return model
