"""GGUF files as a model source: ``target=`` / ``model=`` a ``.gguf`` file, or a folder holding one.

A GGUF file (llama.cpp's format, often quantized: Q4_1, Q8_0, ...) is converted ONCE into a plain
Hugging Face folder (fp32 ``model.safetensors``, ``config.json``, the tokenizer with its chat
template) in the model cache, ``${SPECEQ_CACHE:-~/.cache/speceq}/models/gguf-<sha256 of the
file>/``, and every later load reads that folder: dequantizing takes 15-70 s for a 135 M-parameter
model on one core, reading the folder about a second. The folder is checksummed (see
:mod:`speceq.models.model_cache`): a partial or corrupted copy is rebuilt, never used.

Conversion is transformers' own GGUF loader (``from_pretrained(folder, gguf_file=NAME)``, which
dequantizes and undoes llama.cpp's Q/K row permutation), then the state dict is copied into a
fresh model of the same class and saved: transformers refuses to ``save_pretrained`` a model it
loaded from GGUF. ``quantization_config`` is dropped from ``config.json`` (the weights are plain
fp32 now, and vLLM refuses a folder that names the ``gguf`` quantization method). The
dequantized values are exact in fp32, so the folder gives the same logits as the GGUF model.

Needs the optional extra ``gguf`` (the ``gguf`` and ``accelerate`` packages):
``pip install 'speceq[gguf]'``; without it a :class:`~speceq.errors.MissingExtra` says so.
Importing this module imports no torch.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from speceq.errors import ConfigError, MissingExtra
from speceq.models.model_cache import CachedFolder, cached_folder, sha256_file

#: The file suffix recognised as GGUF.
GGUF_SUFFIX = ".gguf"
#: The optional extra that brings the packages GGUF loading needs.
GGUF_EXTRA = "gguf"
#: Packages of the extra, by import name (transformers needs both to read GGUF).
GGUF_PACKAGES = ("gguf", "accelerate")
#: Prefix of a converted folder's cache key (then the GGUF file's SHA-256).
CACHE_KEY_PREFIX = "gguf-"


def gguf_file_of(path: str | Path) -> Path | None:
    """The GGUF file ``path`` names: ``path`` itself when it ends in ``.gguf``, the single
    ``*.gguf`` of a folder that has no ``config.json``; None for anything else (a plain Hugging
    Face folder). A folder with several GGUF files is ambiguous: ConfigError listing them."""
    p = Path(path).expanduser()
    if p.suffix.lower() == GGUF_SUFFIX:
        if not p.is_file():
            raise ConfigError("GGUF file does not exist", where=str(p))
        return p
    if not p.is_dir() or (p / "config.json").is_file():
        return None
    found = sorted(x for x in p.iterdir() if x.suffix.lower() == GGUF_SUFFIX and x.is_file())
    if len(found) > 1:
        names = ", ".join(x.name for x in found)
        raise ConfigError(f"the folder holds several GGUF files ({names}): name one of them", where=str(p))
    return found[0] if found else None


def require_gguf_extra() -> None:
    """Raise :class:`MissingExtra` naming ``pip install 'speceq[gguf]'`` when a package of the extra is absent."""
    missing = []
    for name in GGUF_PACKAGES:
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise MissingExtra(GGUF_EXTRA, missing, purpose="loading GGUF model files")


def convert_gguf(gguf_path: str | Path, out: str | Path, *, sha256: str | None = None) -> dict[str, Any]:
    """Write the Hugging Face folder of a GGUF file into the (empty) folder ``out``.

    Returns JSON-able facts for the cache manifest (source with its SHA-256, computed unless
    given, class, parameter count, vocabulary).
    """
    require_gguf_extra()
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    src = Path(gguf_path).expanduser().resolve()
    out = Path(out)
    hf_logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name, local_files_only=True)
        loaded: Any = AutoModelForCausalLM.from_pretrained(
            src.parent, gguf_file=src.name, dtype=torch.float32, local_files_only=True
        )
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise ConfigError(f"transformers cannot load this GGUF file: {type(exc).__name__}: {exc}",
                          where=str(src)) from exc
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config._name_or_path = ""
    with torch.random.fork_rng(devices=[]):
        fresh = type(loaded)(config)  # random init, overwritten below (seeded off the global RNG)
    result = fresh.load_state_dict(loaded.state_dict(), strict=False)
    tied = {k for k in result.missing_keys if k.endswith("lm_head.weight")} if config.tie_word_embeddings else set()
    if set(result.missing_keys) - tied or result.unexpected_keys:
        raise ConfigError(
            f"state dict does not fit a fresh {type(loaded).__name__}: missing {result.missing_keys}, "
            f"unexpected {result.unexpected_keys}", where=str(src))
    fresh.tie_weights()
    fresh.generation_config = loaded.generation_config
    fresh.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    _drop_quantization_config(out / "config.json")
    return {
        "source": {"kind": "gguf", "path": str(src), "sha256": sha256 or sha256_file(src), "size": src.stat().st_size},
        "class": type(fresh).__name__,
        "parameters": int(sum(p.numel() for p in fresh.parameters())),
        "vocab_size": int(config.vocab_size),
        "dtype": "float32",
        "transformers": transformers.__version__,
    }


def _drop_quantization_config(config_json: Path) -> None:
    data = json.loads(config_json.read_text(encoding="utf-8"))
    if data.pop("quantization_config", None) is not None:
        config_json.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def converted_folder(
    gguf_path: str | Path, *, cache: str | Path | None = None, log: Callable[[str], None] | None = None
) -> CachedFolder:
    """The cached Hugging Face folder of a GGUF file, converting it when absent or invalid."""
    src = Path(gguf_path).expanduser()
    require_gguf_extra()
    digest = sha256_file(src)
    return cached_folder(CACHE_KEY_PREFIX + digest, lambda out: convert_gguf(src, out, sha256=digest),
                         cache=cache, log=log)


def resolve_model_folder(path: str | Path, *, log: Callable[[str], None] | None = None) -> tuple[Path, dict[str, Any]]:
    """(folder to load, provenance): a plain folder as it is; a GGUF file or a folder holding one
    as its cached converted folder, with ``{"gguf": path, "gguf_sha256": ...}`` as provenance."""
    gguf_path = gguf_file_of(path)
    if gguf_path is None:
        return Path(path), {}
    folder = converted_folder(gguf_path, log=log)
    source = folder.manifest.get("source", {})
    return folder.path, {"gguf": str(gguf_path), "gguf_sha256": source.get("sha256"), "converted": str(folder.path)}
