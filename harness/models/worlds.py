"""The bundled model worlds of ``speceq run --models``: which models and cases a world uses.

- ``byte``: the 259-token byte models (``target/``, ``draft/``) and ``speceq.inputs.cases.default_cases()``;
- ``bpe``: the 32 000-token BPE models (``bpe-target/``, ``bpe-draft/``) and ``speceq.inputs.cases.bpe_cases()``;
- ``smollm2``: SmolLM2-135M-Instruct and its layer-skipping draft, prepared into the model cache
  by ``speceq smollm2 prepare``, and ``speceq.inputs.cases.smollm2_cases()``.

- ``mtp``: a tiny DeepSeek-V3 with one multi-token-prediction layer on the byte vocabulary, built
  from config into the model cache (:mod:`speceq.models.mtp`), and the byte world's cases: the
  world of ``hf-mtp``, whose drafts come from the target's own MTP layer;
- ``gemma4``: a tiny Gemma-4 target and multi-token assistant on the byte vocabulary, built from
  config into the model cache (:mod:`speceq.models.multi_token`), and the byte world's cases: the
  world of ``hf-multi-token``.

``hf-universal`` (a draft with its own tokenizer) gets another vocabulary's draft: the BPE draft
in ``byte`` (the engine's default) and ``smollm2``, the byte draft in ``bpe`` (which transformers
cannot run: the engine says why).

:func:`world_engine_options` fills the model-folder options (``target``, ``draft``, or the
``openai`` engine's ``tokenizer``) of the built-in engines for a world, leaving every option
the user gave untouched; engines it does not know (plug-ins, plain functions) declare their
own vocabulary. Python users pass the same folders as engine options themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from speceq.errors import ConfigError

WORLDS: tuple[str, ...] = ("byte", "bpe", "smollm2", "mtp", "gemma4")
#: The world of ``--models`` when none is named: the bundled byte models.
DEFAULT_WORLD = "byte"

_TARGET_ONLY = {"baseline", "hf-sample", "hf-prompt-lookup", "hf-early-exit", "hf-dflash", "mutant:draft-is-target"}
_TARGET_AND_DRAFT = {"reference", "hf-assisted", "hf-ensemble"}
#: engines whose draft has its own tokenizer: each world gives them a draft of another world's vocabulary
_OTHER_VOCABULARY_DRAFT = {"hf-universal"}
#: engines that need a target of their own world (one with MTP layers)
_MTP_TARGET = {"hf-mtp"}
#: engines that need the gemma4 world's pair (a Gemma-4 target and its multi-token assistant)
_GEMMA4_PAIR = {"hf-multi-token"}
#: the one world each of the engines above runs in (every other world refuses them)
_HOME_WORLD = {**dict.fromkeys(_MTP_TARGET, "mtp"), **dict.fromkeys(_GEMMA4_PAIR, "gemma4")}


#: The portable tokenizer name (:mod:`speceq.models.named_tokenizers`) of each world's target: the mtp and gemma4
#: worlds' tiny models are built on the byte vocabulary.
WORLD_TOKENIZERS: dict[str, str] = {"byte": "bytes", "bpe": "bpe", "smollm2": "smollm2", "mtp": "bytes",
                                    "gemma4": "bytes"}


def world_tokenizer(world: str) -> str:
    """The tokenizer name of ``world``'s target (what a case's ``tokenizer`` names for its grammar or stop strings)."""
    return WORLD_TOKENIZERS[check_world(world)]


def check_world(world: str) -> str:
    """Return ``world`` or raise :class:`ConfigError` listing the known worlds."""
    if world not in WORLDS:
        raise ConfigError(f"unknown model world {world!r}; expected one of {', '.join(WORLDS)}", where="--models")
    return world


def home_world(spec: str) -> str | None:
    """The only world built-in engine ``spec`` runs in with the world's own models (``hf-mtp``: ``mtp``,
    ``hf-multi-token``: ``gemma4``), or None when any world serves it (or it is not a built-in)."""
    return _HOME_WORLD.get(spec)


def runs_world_models(spec: str, options: Mapping[str, Any]) -> bool:
    """Whether engine ``spec`` with the user's ``options`` runs only the world's own models: a
    built-in model engine (or a mutant) given no ``target`` / ``draft`` / ``model`` option."""
    builtin = (spec in _TARGET_ONLY or spec in _TARGET_AND_DRAFT or spec in _OTHER_VOCABULARY_DRAFT
               or spec in _MTP_TARGET or spec in _GEMMA4_PAIR or spec.startswith("mutant:"))
    return builtin and not ({"target", "draft", "model"} & set(options))


def world_engine_options(world: str, spec: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with the world's model folders added where the built-in engine ``spec`` takes them."""
    check_world(world)
    out = dict(options)
    if spec in _MTP_TARGET and world != _HOME_WORLD[spec] and "target" not in out:
        raise ConfigError(
            f"{spec} drafts with the target's own MTP layers, which the {world} world's target lacks (and its "
            "baseline would sample another model): add --models mtp (a tiny MTP model built into the cache)",
            where="--models",
        )
    if spec in _GEMMA4_PAIR and world != _HOME_WORLD[spec] and "target" not in out:
        raise ConfigError(
            f"{spec} drafts with a Gemma-4 assistant that reads a Gemma-4 target's states, which the {world} "
            "world's target is not (and its baseline would sample another model): add --models gemma4 (a tiny "
            "Gemma-4 pair built into the cache)",
            where="--models",
        )
    if world == "gemma4":
        from speceq.models.multi_token import gemma4_folders

        target_dir, assistant_dir = (str(f) for f in gemma4_folders())
        if spec in _TARGET_ONLY or spec in _GEMMA4_PAIR:
            out.setdefault("target", target_dir)
        if spec in _GEMMA4_PAIR:
            out.setdefault("draft", assistant_dir)
        elif spec == "openai" and "vocab_size" not in out and "eos_token_id" not in out:
            out.setdefault("tokenizer", target_dir)
        return out
    if world == "mtp":
        from speceq.models.mtp import mtp_model_folder

        if spec in _TARGET_ONLY or spec in _MTP_TARGET:
            out.setdefault("target", str(mtp_model_folder()))
        elif spec == "openai" and "vocab_size" not in out and "eos_token_id" not in out:
            out.setdefault("tokenizer", str(mtp_model_folder()))
        return out
    if world == "byte":
        return out  # hf-universal's defaults: the byte target, the BPE draft
    if spec in _OTHER_VOCABULARY_DRAFT:
        return _other_vocabulary_draft(world, out)
    if world == "bpe":
        from speceq.models.bpe import BPE_DRAFT_DIR, BPE_TARGET_DIR

        target_dir, draft_dir = str(BPE_TARGET_DIR), str(BPE_DRAFT_DIR)
    else:
        from speceq.models.smollm2 import prepared

        folders = prepared()
        target_dir, draft_dir = str(folders.target), str(folders.draft)
    if spec in _TARGET_ONLY:
        out.setdefault("target", target_dir)
    elif spec in _TARGET_AND_DRAFT or spec.startswith("mutant:"):
        out.setdefault("target", target_dir)
        out.setdefault("draft", draft_dir)
    elif spec == "openai":
        if "vocab_size" not in out and "eos_token_id" not in out:
            out.setdefault("tokenizer", target_dir)
    return out


def _other_vocabulary_draft(world: str, options: dict[str, Any]) -> dict[str, Any]:
    """The world's target and a draft whose tokenizer differs from the target's (for hf-universal)."""
    from speceq.models import DRAFT_DIR
    from speceq.models.bpe import BPE_DRAFT_DIR, BPE_TARGET_DIR

    if world == "bpe":
        options.setdefault("target", str(BPE_TARGET_DIR))
        options.setdefault("draft", str(DRAFT_DIR))
    else:
        from speceq.models.smollm2 import prepared

        options.setdefault("target", str(prepared().target))
        options.setdefault("draft", str(BPE_DRAFT_DIR))
    return options
