"""Where an engine's vocabulary size and EOS id come from, and hints that name the fixing option.

Engines compare token ids, so the harness must know each engine's vocabulary size and EOS
id. Hugging Face engines read them from the model (logit count, ``generation_config`` /
``config``, then the tokenizer files next to the weights); the ``openai`` engine reads them
from ``tokenizer=PATH``; a plain function declares them (``fn.vocab_size``,
``fn.eos_token_id`` or options). Only when nothing declares them do the bundled byte
model's values apply (259 and 257), and every error that involves them then says so and
names the option that fixes it. No torch is imported here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speceq.errors import ConfigError

#: The bundled byte model's vocabulary and EOS (speceq.models.VOCAB_SIZE / EOS_ID).
BYTE_VOCAB_SIZE = 259
BYTE_EOS_TOKEN_ID = 257
#: ``vocab_source`` / ``eos_source`` of a value that nothing declared.
DEFAULT_SOURCE = "default"


@dataclass(frozen=True, slots=True)
class TokenizerVocab:
    """Vocabulary facts of a local Hugging Face tokenizer (``tokenizer.json`` and its configs)."""

    path: str
    vocab_size: int  # number of ids the tokenizer can produce (base vocabulary + added tokens)
    eos_token_id: int | None
    pad_token_id: int | None
    bos_token_id: int | None


def _token_name(value: Any) -> str | None:
    """A special token's text from tokenizer_config / special_tokens_map (a string or an AddedToken dict)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def read_tokenizer(path: str | Path) -> TokenizerVocab:
    """Read a local HF tokenizer: a folder holding ``tokenizer.json``, or the file itself.

    EOS / PAD / BOS come from ``tokenizer_config.json`` or ``special_tokens_map.json`` next to
    it (token strings looked up in the tokenizer). Raises :class:`ConfigError` naming the path.
    """
    p = Path(path).expanduser()
    file = p / "tokenizer.json" if p.is_dir() else p
    where = f"tokenizer {str(path)!r}"
    if not file.is_file():
        raise ConfigError(f"no tokenizer.json at {file}; give a tokenizer folder or its tokenizer.json", where=where)
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_file(str(file))
    except Exception as exc:  # the tokenizers package raises a bare Exception on bad files
        raise ConfigError(f"cannot load {file}: {exc}", where=where) from None
    names: dict[str, str] = {}
    for side in ("special_tokens_map.json", "tokenizer_config.json"):  # the latter wins
        cfg_path = file.parent / side
        if cfg_path.is_file():
            try:
                cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise ConfigError(f"unreadable {cfg_path.name}: {exc}", where=where) from None
            for key in ("eos_token", "pad_token", "bos_token"):
                name = _token_name(cfg.get(key))
                if name is not None:
                    names[key] = name

    def lookup(key: str) -> int | None:
        name = names.get(key)
        if name is None:
            return None
        tid = tok.token_to_id(name)
        if tid is None:
            raise ConfigError(f"{key} {name!r} of the tokenizer config is not in the vocabulary", where=where)
        return int(tid)

    return TokenizerVocab(
        path=str(file),
        vocab_size=int(tok.get_vocab_size(with_added_tokens=True)),
        eos_token_id=lookup("eos_token"),
        pad_token_id=lookup("pad_token"),
        bos_token_id=lookup("bos_token"),
    )


def model_folder_tokenizer(model: Any) -> TokenizerVocab | None:
    """The tokenizer stored next to a loaded HF model's weights, when its folder has one."""
    folder = getattr(getattr(model, "config", None), "_name_or_path", "") or getattr(model, "name_or_path", "")
    if not folder:
        return None
    p = Path(str(folder))
    if not (p.is_dir() and (p / "tokenizer.json").is_file()):
        return None
    return read_tokenizer(p)


def option_hint(role: str | None, option: str, value: Any, engine: Any = None) -> str:
    """``set --candidate-option vocab_size=32000`` (or the engine-option form without a role).

    With ``engine``, only an option its constructor takes is suggested: an engine that reads its
    vocabulary or EOS from a model (``baseline``, ``reference``, ``hf-*``) is told to change the model
    (``target=...``) or the prompts instead, and one that takes neither is told the value is its own.
    """
    if engine is None or accepts_option(engine, option):
        return _set_option(role, option, value)
    what = "vocabulary" if option == "vocab_size" else "EOS id"
    if accepts_option(engine, "target"):
        return (f"the {what} of this engine is its model's, so it takes no {option} option: use prompts made by that "
                f"model's tokenizer (the cases file's 'tokenizer'), or give it the model they were made for "
                f"({_set_option(role, 'target', '<model folder>').removeprefix('set ')}, or --models bpe/smollm2 "
                f"for a bundled one)")
    return (f"this engine declares its {what} itself (it takes no {option} option): correct the engine's "
            f"{option} attribute if it is wrong")


def _set_option(role: str | None, option: str, value: Any) -> str:
    if role in ("baseline", "candidate"):
        return f"set --{role}-option {option}={value}"
    return f"set the engine's {option}={value} option"


def accepts_option(engine: Any, option: str) -> bool:
    """Whether ``option`` is a keyword of the engine's constructor (``**kwargs`` passed on up the classes).

    A :class:`~speceq.engines.function.FunctionEngine` and the ``openai`` engine take ``vocab_size``;
    the model engines take ``target`` and ``eos_token_id`` but not ``vocab_size``.
    """
    import inspect

    for cls in type(engine).__mro__:
        init = cls.__dict__.get("__init__")
        if init is None:
            continue
        try:
            params = inspect.signature(init).parameters
        except (TypeError, ValueError):
            return False
        if option in params and params[option].kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                        inspect.Parameter.KEYWORD_ONLY):
            return True
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            return False
    return False


def source_note(engine: Any, attr: str) -> str:
    """``", the bundled byte model's default"`` when ``engine.<attr>`` was not declared by anything."""
    source = getattr(engine, "vocab_source" if attr == "vocab_size" else "eos_source", None)
    return ", the bundled byte model's default" if source == DEFAULT_SOURCE else ""
