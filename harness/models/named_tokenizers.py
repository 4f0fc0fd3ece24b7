"""Portable tokenizer names for cases files: ``bytes``, ``bpe`` and ``smollm2``.

A cases file that names a path ties itself to one machine: the prepared SmolLM2 model lives in an
absolute, hashed cache folder (``~/.cache/speceq/models/gguf-<sha256>``). A name is resolved when
the file is loaded, on the machine that loads it: ``smollm2`` to the folder ``speceq smollm2
prepare`` made there (under ``$SPECEQ_CACHE``), ``bpe`` to the bundled BPE world's folder.
``bytes`` (the bundled byte tokenizer) needs no folder.
"""

from __future__ import annotations

from pathlib import Path

from speceq.errors import ConfigError

#: Name -> what it is, for docs and error messages.
TOKENIZER_NAMES: dict[str, str] = {
    "bytes": "the bundled byte tokenizer (<bos> + UTF-8 bytes, 259 tokens; no chat template)",
    "bpe": "the bundled BPE world's tokenizer (32 000 tokens)",
    "smollm2": "SmolLM2-135M-Instruct's tokenizer and chat template, from the folder 'speceq smollm2 prepare' made",
}


def named_tokenizer_folder(name: str, cache: str | Path | None = None) -> Path | None:
    """The folder holding the ``tokenizer.json`` of tokenizer ``name``; None for ``bytes`` and for a
    string that is not one of :data:`TOKENIZER_NAMES` (a path).

    ``smollm2`` raises ConfigError saying how to prepare it when this machine has not (``cache``:
    the cache root, default ``$SPECEQ_CACHE`` or ``~/.cache/speceq``).
    """
    if name == "bpe":
        from speceq.models.bpe import BPE_TARGET_DIR

        return BPE_TARGET_DIR
    if name == "smollm2":
        from speceq.models.model_cache import check_folder
        from speceq.models.smollm2 import paths

        folder = paths(cache).target
        check = check_folder(folder)
        if not check.ok:
            raise ConfigError(f"the SmolLM2 model is not prepared on this machine ({check.reason} at {folder}): "
                              "run speceq smollm2 prepare (it sets up the tokenizer this name stands for)")
        return folder
    return None


__all__ = ["TOKENIZER_NAMES", "named_tokenizer_folder"]
