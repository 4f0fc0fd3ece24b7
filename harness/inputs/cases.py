"""Cases: :class:`Case` (one equivalence check), cases files (JSON or TOML) -> list[Case],
and the default cases of ``speceq run``.

A :class:`Case` is one prompt (token ids), its sampling parameters and its batch context
(batch size and the companion prompts that share a batch with it, so that padding and
ragged acceptance are exercised).

The format is documented in ``docs/reference/cases.md`` (example: ``examples/cases.json``). Every
problem is a :class:`~speceq.errors.ConfigError` whose ``where`` names the file, the case
(index and id) and the field, and whose message says what was expected.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speceq.core.params import SamplingParams, validate_params
from speceq.errors import ConfigError
from speceq.models.named_tokenizers import TOKENIZER_NAMES, named_tokenizer_folder

PARAM_FIELDS: tuple[str, ...] = ("temperature", "top_k", "top_p", "max_new_tokens", "ignore_eos", "min_p",
                                  "repetition_penalty", "presence_penalty", "frequency_penalty", "logit_bias",
                                  "processing", "stop", "include_stop_str_in_output", "seed",
                                  "structured_outputs")
#: Parameters read as plain numbers.
NUMBER_FIELDS: tuple[str, ...] = ("temperature", "top_p", "min_p", "repetition_penalty", "presence_penalty",
                                  "frequency_penalty")
#: Fields a case or the ``defaults`` section may set.
SHARED_FIELDS: tuple[str, ...] = (*PARAM_FIELDS, "batch_size", "companions", "tokenizer", "samples")
CASE_FIELDS: tuple[str, ...] = ("id", "prompt", "prompt_ids", "messages", *SHARED_FIELDS)
#: The prompt fields of a case: exactly one is given.
PROMPT_FIELDS: tuple[str, ...] = ("prompt", "prompt_ids", "messages")
#: Keys of one chat message of a ``messages`` list.
MESSAGE_FIELDS: tuple[str, ...] = ("role", "content")
TOP_FIELDS: tuple[str, ...] = ("defaults", "cases")
#: Tokenizer name of the bundled byte tokenizer (the default).
BYTES_TOKENIZER = "bytes"
#: Upper bound on every integer in a cases file (token ids, sizes): int32-safe everywhere.
INT_LIMIT = 2**31
MAX_ID_LENGTH = 200

Encoder = Callable[[str], list[int]]
#: Renders a chat (role/content dicts) with a tokenizer's chat template and generation prompt:
#: (token ids, rendered text).
ChatRenderer = Callable[[list[dict[str, str]]], tuple[list[int], str]]
#: Location of a field in a file, for ConfigError.where: field name -> "file: case 1 (id 'x'), field 'name'".
At = Callable[[str], str]


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    """One equivalence check: a prompt, its parameters and its batch context.

    ``prompt_ids`` are token ids of the target's vocabulary. ``companions`` are other
    prompts (token ids) that share each batch with this one, so a batch holds rows of
    different lengths. ``batch_size`` is the number of rows per engine batch.
    ``text`` keeps the prompt text when the case was written as text (display only).
    ``samples`` overrides the run's samples per engine for this case (e.g. fewer for an
    expensive unbatched case); None uses the run's. ``tokenizer`` names the tokenizer of the ids when the
    cases file gave one (a portable name, ``bytes``/``bpe``/``smollm2``, or a tokenizer.json path), so that the
    faces show token text (display only, like ``text``; not part of the store keys).
    """

    case_id: str
    prompt_ids: tuple[int, ...]
    params: SamplingParams = field(default_factory=SamplingParams)
    batch_size: int = 1
    companions: tuple[tuple[int, ...], ...] = ()
    text: str | None = None
    samples: int | None = None
    tokenizer: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.case_id, str) or not self.case_id:
            raise ConfigError(f"expected a non-empty string, got {self.case_id!r}", where="case.id")
        where = f"case {self.case_id!r}"
        if len(self.prompt_ids) == 0:
            raise ConfigError("empty prompt: give at least one token (or non-empty text)", where=f"{where}.prompt")
        for i, t in enumerate(self.prompt_ids):
            if isinstance(t, bool) or not isinstance(t, int) or t < 0:
                raise ConfigError(f"token {i} is {t!r}; expected a non-negative integer id", where=f"{where}.prompt")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ConfigError(f"expected an integer >= 1, got {self.batch_size!r}", where=f"{where}.batch_size")
        if self.samples is not None and (isinstance(self.samples, bool) or not isinstance(self.samples, int) or self.samples < 1):
            raise ConfigError(f"expected an integer >= 1 (or nothing), got {self.samples!r}", where=f"{where}.samples")
        for j, c in enumerate(self.companions):
            if len(c) == 0:
                raise ConfigError(f"companion {j} is empty", where=f"{where}.companions")
        validate_params(self.params, where=where)

    @property
    def prompts(self) -> list[list[int]]:
        """The prompts of one batch layout: this case's prompt first, then companions."""
        return [list(self.prompt_ids), *(list(c) for c in self.companions)]

    def check_vocab(self, vocab_size: int) -> None:
        """Raise ConfigError when a token id (of a prompt, or a ``logit_bias`` key) is outside ``[0, vocab_size)``,
        or when stop strings would be matched with the byte tokenizer on a larger vocabulary."""
        if (self.params.stop or self.params.structured_outputs) and self.params.tokenizer == BYTES_TOKENIZER:
            from speceq.models.tokenizer import VOCAB_SIZE

            what = "stop strings are" if self.params.stop else "the grammar is"
            if vocab_size > VOCAB_SIZE:
                raise ConfigError(f"{what} matched on rows decoded with the byte tokenizer ({VOCAB_SIZE} "
                                  f"tokens), but the engine's vocabulary has {vocab_size}: set 'tokenizer' to the "
                                  "model's", where=f"case {self.case_id!r}.tokenizer")
        for t, _ in self.params.logit_bias:
            if t >= vocab_size:
                raise ConfigError(f"key {t} is outside the vocabulary [0, {vocab_size})",
                                  where=f"case {self.case_id!r}.logit_bias")
        for name, ids in [("prompt", self.prompt_ids), *((f"companions[{j}]", c) for j, c in enumerate(self.companions))]:
            for i, t in enumerate(ids):
                if t >= vocab_size:
                    raise ConfigError(
                        f"token {i} is {t}, outside the vocabulary [0, {vocab_size})",
                        where=f"case {self.case_id!r}.{name}",
                    )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.case_id,
            "prompt_ids": list(self.prompt_ids),
            "text": self.text,
            "params": self.params.to_dict(),
            "batch_size": self.batch_size,
            "companions": [list(c) for c in self.companions],
            **({"samples": self.samples} if self.samples is not None else {}),
            **({"tokenizer": self.tokenizer} if self.tokenizer is not None else {}),
        }


def _did_you_mean(name: str, allowed: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(name, allowed, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _field_at(prefix: str) -> At:
    return lambda name: f"{prefix}field {name!r}"


def _check_keys(obj: Mapping[str, Any], allowed: tuple[str, ...], at: At) -> None:
    for k in obj:
        if k not in allowed:
            raise ConfigError(
                f"unknown field {k!r}{_did_you_mean(str(k), allowed)}; expected one of {', '.join(allowed)}", where=at(k)
            )


def _type_name(v: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(v), type(v).__name__
    )


def _int(v: Any, where: str, *, minimum: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConfigError(f"expected an integer >= {minimum}, got {_type_name(v)} {v!r}", where=where)
    if not minimum <= v < INT_LIMIT:
        raise ConfigError(f"expected an integer in [{minimum}, 2**31), got {v}", where=where)
    return v


def _number(v: Any, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ConfigError(f"expected a number, got {_type_name(v)} {v!r}", where=where)
    try:
        x = float(v)
    except OverflowError:
        raise ConfigError(f"number too large: {v}", where=where) from None
    if not math.isfinite(x):
        raise ConfigError(f"expected a finite number, got {v!r}", where=where)
    return x


def _logit_bias(v: Any, where: str) -> dict[int, float]:
    """``{"<token id>": bias}`` (JSON and TOML keys are strings) as {int: float}."""
    if not isinstance(v, dict):
        raise ConfigError(f"expected an object {{token id: bias}}, got {_type_name(v)} {v!r}", where=where)
    out: dict[int, float] = {}
    for k, b in v.items():
        key = k if isinstance(k, int) and not isinstance(k, bool) else None
        if isinstance(k, str) and k.strip().isdigit():
            key = int(k)
        if key is None:
            raise ConfigError(f"key {k!r} is not a token id (expected a non-negative integer)", where=where)
        if key in out:
            raise ConfigError(f"token id {key} is given twice", where=where)
        out[_int(key, where, minimum=0)] = _number(b, where)
    return out


def _stop_strings(v: Any, where: str) -> tuple[str, ...]:
    """``stop``: a string or a non-empty list of non-empty strings."""
    items = [v] if isinstance(v, str) else list(v) if isinstance(v, tuple) else v  # a tuple: a pytest marker's
    if not isinstance(items, list):
        raise ConfigError(f"expected a string or a list of strings, got {_type_name(v)} {v!r}", where=where)
    if not items:
        raise ConfigError("empty stop list: give at least one stop string, or leave 'stop' out", where=where)
    for i, x in enumerate(items):
        if not isinstance(x, str) or not x:
            raise ConfigError(f"stop string {i} is {_type_name(x)} {x!r}; expected a non-empty string", where=where)
    return tuple(items)


def _token_ids(v: Any, at: At, name: str) -> tuple[int, ...]:
    where = at(name)
    if not isinstance(v, list):
        raise ConfigError(f"expected a list of token ids, got {_type_name(v)}", where=where)
    if not v:
        raise ConfigError("empty prompt: give at least one token id", where=where)
    return tuple(_int(t, at(f"{name}[{i}]"), minimum=0) for i, t in enumerate(v))


def _text(v: Any, at: At, name: str, encode: Encoder) -> tuple[int, ...]:
    where = at(name)
    if not isinstance(v, str):
        raise ConfigError(f"expected a string, got {_type_name(v)}", where=where)
    if not v:
        raise ConfigError("empty prompt: give non-empty text", where=where)
    ids = tuple(encode(v))
    if not ids:
        raise ConfigError(f"text {v!r} encodes to no tokens", where=where)
    return ids


class _Tokenizers:
    """Named tokenizers of one cases file, loaded once each."""

    def __init__(self, base_dir: Path | None) -> None:
        self.base_dir = base_dir
        self._cache: dict[str, Encoder] = {}
        self._chats: dict[str, ChatRenderer] = {}

    def get(self, name: Any, where: str) -> Encoder:
        if not isinstance(name, str) or not name:
            raise ConfigError(f"expected a tokenizer name ({', '.join(TOKENIZER_NAMES)}) or a path to a "
                              f"tokenizer.json, got {name!r}", where=where)
        if name not in self._cache:
            self._cache[name] = self._load(name, where)
        return self._cache[name]

    def chat(self, name: Any, where: str, messages_where: str) -> ChatRenderer:
        """The chat renderer of tokenizer ``name`` (its folder's chat template)."""
        self.get(name, where)  # the same checks and errors as for text prompts
        if name not in self._chats:
            if name == BYTES_TOKENIZER:
                raise ConfigError(
                    f"the {BYTES_TOKENIZER!r} tokenizer has no chat template: set 'tokenizer' to a Hugging Face "
                    "tokenizer folder whose tokenizer_config.json or chat_template.jinja holds one", where=messages_where)
            self._chats[name] = _chat_renderer(self._file(name, where).parent, messages_where)
        return self._chats[name]

    def display_name(self, name: str, where: str) -> str:
        """What a result stores of tokenizer ``name``: a portable name as it is, a path as its tokenizer.json."""
        return name if name in TOKENIZER_NAMES else str(self._file(name, where).resolve())

    def _file(self, name: str, where: str) -> Path:
        try:
            named = named_tokenizer_folder(name)  # a portable name (bpe, smollm2) wins over a path
        except ConfigError as e:
            raise ConfigError(f"tokenizer {name!r}: {e}", where=where) from None
        if named is not None:
            return named / "tokenizer.json"
        path = Path(name)
        if not path.is_absolute() and self.base_dir is not None:
            path = self.base_dir / path
        from speceq.models.gguf import gguf_file_of

        try:
            is_gguf = gguf_file_of(path) is not None
        except ConfigError as e:
            raise ConfigError(str(e), where=where) from None
        if is_gguf:  # a GGUF model file: the tokenizer of its converted folder
            from speceq.models.gguf import resolve_model_folder

            path = resolve_model_folder(path)[0]
        if path.is_dir():
            path = path / "tokenizer.json"
        if not path.is_file():
            raise ConfigError(
                f"tokenizer {name!r} is neither a name ({', '.join(TOKENIZER_NAMES)}) nor an existing tokenizer.json "
                f"(looked at {path})",
                where=where,
            )
        return path

    def _load(self, name: str, where: str) -> Encoder:
        if name == BYTES_TOKENIZER:
            from speceq.models.tokenizer import ByteTokenizer

            return ByteTokenizer().encode
        path = self._file(name, where)
        from tokenizers import Tokenizer

        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as e:  # the tokenizers package raises a bare Exception on bad files
            raise ConfigError(f"cannot load tokenizer {path}: {e}", where=where) from None
        return lambda text: list(tok.encode(text).ids)


def _chat_renderer(folder: Path, where: str) -> ChatRenderer:
    """Render messages as the model's own ``apply_chat_template(messages, add_generation_prompt=True)``."""
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot load the tokenizer of {folder} to render messages: {e}", where=where) from None
    if not getattr(tok, "chat_template", None):
        raise ConfigError(f"the tokenizer in {folder} has no chat template (no chat_template in tokenizer_config.json, "
                          "no chat_template.jinja): give 'prompt' or 'prompt_ids' instead", where=where)

    def render(messages: list[dict[str, str]]) -> tuple[list[int], str]:
        from jinja2 import TemplateError

        try:
            text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        except TemplateError as e:  # e.g. the template's raise_exception("roles must alternate")
            raise ConfigError(f"the chat template of {folder} refuses these messages: {e}", where=where) from None
        return [int(i) for i in ids], str(text)

    return render


def _messages(v: Any, at: At, name: str, render: Callable[[], ChatRenderer]) -> tuple[tuple[int, ...], str]:
    """(token ids, rendered text) of a ``messages`` list; errors name the message and key."""
    where = at(name)
    if not isinstance(v, list):
        raise ConfigError(f"expected a list of {{'role': ..., 'content': ...}} objects, got {_type_name(v)}",
                          where=where)
    if not v:
        raise ConfigError("empty chat: give at least one message", where=where)
    messages = []
    for i, m in enumerate(v):
        item = at(f"{name}[{i}]")
        if not isinstance(m, dict):
            raise ConfigError(f"expected an object with 'role' and 'content', got {_type_name(m)}", where=item)
        _check_keys(m, MESSAGE_FIELDS, lambda k, i=i: at(f"{name}[{i}].{k}"))
        for key in MESSAGE_FIELDS:
            if key not in m:
                raise ConfigError(f"missing {key!r}", where=item)
            if not isinstance(m[key], str) or (key == "role" and not m[key]):
                raise ConfigError(f"expected a {'non-empty ' if key == 'role' else ''}string, got "
                                  f"{_type_name(m[key])} {m[key]!r}", where=at(f"{name}[{i}].{key}"))
        messages.append({"role": m["role"], "content": m["content"]})
    ids, text = render()(messages)
    if not ids:
        raise ConfigError("the chat renders to no tokens", where=where)
    return tuple(ids), text


def _parse_text(text: str, source: str, fmt: str) -> Any:
    if fmt == "json":
        def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for k, v in pairs:
                if k in out:
                    raise ConfigError(f"duplicate key {k!r} in one object", where=source)
                out[k] = v
            return out

        try:
            return json.loads(text, object_pairs_hook=no_duplicates)
        except json.JSONDecodeError as e:
            raise ConfigError(f"malformed JSON at line {e.lineno}, column {e.colno}: {e.msg}", where=source) from None
        except RecursionError:
            raise ConfigError("malformed JSON: nested too deeply", where=source) from None
    if fmt == "toml":
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"malformed TOML: {e}", where=source) from None
        except RecursionError:
            raise ConfigError("malformed TOML: nested too deeply", where=source) from None
    raise ConfigError(f"unknown cases format {fmt!r}; expected 'json' or 'toml'", where=source)


def _build_case(raw: Any, index: int, defaults: Mapping[str, Any], source: str, toks: _Tokenizers) -> Case:
    if not isinstance(raw, dict):
        raise ConfigError(f"expected an object with at least 'id' and 'prompt', got {_type_name(raw)}", where=f"{source}: case {index}")
    cid = raw.get("id")
    if not isinstance(cid, str) or not cid.strip() or not cid.isprintable() or len(cid) > MAX_ID_LENGTH:
        raise ConfigError(
            f"expected a non-empty printable string of at most {MAX_ID_LENGTH} characters, got {cid!r}",
            where=f"{source}: case {index}, field 'id'",
        )
    case_at = _field_at(f"{source}: case {index} (id {cid!r}), ")
    _check_keys(raw, CASE_FIELDS, case_at)
    defaults_at = _field_at(f"{source}: defaults, ")

    def at(name: str) -> str:  # a value taken from the defaults section is reported there
        return defaults_at(name) if name.split("[")[0] not in raw and name.split("[")[0] in defaults else case_at(name)

    merged = {**defaults, **raw}
    tokenizer = merged.get("tokenizer", BYTES_TOKENIZER)
    encode = toks.get(tokenizer, at("tokenizer"))
    given = [f for f in PROMPT_FIELDS if f in raw]
    if len(given) != 1:
        raise ConfigError("give exactly one of 'prompt' (text), 'prompt_ids' (token ids) and 'messages' (a chat)",
                          where=at(given[0] if given else "prompt"))

    def chat(name: str) -> Callable[[], ChatRenderer]:
        return lambda: toks.chat(tokenizer, at("tokenizer"), at(name))

    if "prompt" in raw:
        prompt_ids, text = _text(raw["prompt"], at, "prompt", encode), raw["prompt"]
    elif "messages" in raw:
        prompt_ids, text = _messages(raw["messages"], at, "messages", chat("messages"))
    else:
        prompt_ids, text = _token_ids(raw["prompt_ids"], at, "prompt_ids"), None

    companions: list[tuple[int, ...]] = []
    comp = merged.get("companions", [])
    if not isinstance(comp, list):
        raise ConfigError(f"expected a list of texts, token-id lists or chats, got {_type_name(comp)}",
                          where=at("companions"))
    for j, c in enumerate(comp):
        name = f"companions[{j}]"
        if isinstance(c, str):
            companions.append(_text(c, at, name, encode))
        elif isinstance(c, list) and c and all(isinstance(m, dict) for m in c):
            companions.append(_messages(c, at, name, chat(name))[0])
        elif isinstance(c, list):
            companions.append(_token_ids(c, at, name))
        else:
            raise ConfigError(f"expected a text, a list of token ids or a chat (list of messages), got {_type_name(c)}",
                              where=at(name))

    params: dict[str, Any] = {}
    for name in PARAM_FIELDS:
        if name not in merged:
            continue
        v = merged[name]
        if name in NUMBER_FIELDS:
            params[name] = _number(v, at(name))
        elif name == "logit_bias":
            params[name] = _logit_bias(v, at(name))
        elif name == "processing":
            if not isinstance(v, str):
                raise ConfigError(f"expected a string, got {_type_name(v)} {v!r}", where=at(name))
            params[name] = v
        elif name == "stop":
            params[name] = _stop_strings(v, at(name))
        elif name == "structured_outputs":
            if not isinstance(v, dict):
                raise ConfigError(f"expected an object with exactly one of regex, json, choice, grammar, got "
                                  f"{_type_name(v)} {v!r}", where=at(name))
            params[name] = v
        elif name in ("ignore_eos", "include_stop_str_in_output"):
            if not isinstance(v, bool):
                raise ConfigError(f"expected true or false, got {_type_name(v)} {v!r}", where=at(name))
            params[name] = v
        else:
            params[name] = _int(v, at(name), minimum=1 if name == "max_new_tokens" else 0)
    if params.get("stop") or params.get("structured_outputs"):  # rows are decoded with the case's tokenizer: a
        # name, or the file it resolved to
        params["tokenizer"] = toks.display_name(tokenizer, at("tokenizer"))
    batch_size = _int(merged.get("batch_size", 1), at("batch_size"), minimum=1)
    samples = None if merged.get("samples") is None else _int(merged["samples"], at("samples"), minimum=1)
    try:
        sp = SamplingParams(**params)
    except ConfigError as e:  # range errors; re-anchor them at this file and case
        field = e.where or "params"
        msg = str(e)[len(e.where) + 2 :] if e.where else str(e)
        raise ConfigError(msg, where=at(field)) from None
    return Case(case_id=cid, prompt_ids=prompt_ids, params=sp, batch_size=batch_size, companions=tuple(companions),
                text=text, samples=samples, tokenizer=toks.display_name(tokenizer, at("tokenizer")) if "tokenizer" in merged
                else None)


def parse_cases(data: Any, *, source: str = "<cases>", base_dir: Path | None = None) -> list[Case]:
    """Cases from an already-decoded document (the ``{"defaults", "cases"}`` object or a list of cases).

    ``base_dir`` resolves relative tokenizer paths (the cases file's folder).
    """
    if isinstance(data, list):
        data = {"cases": data}
    if not isinstance(data, dict):
        raise ConfigError(f"expected an object with a 'cases' list, got {_type_name(data)}", where=source)
    _check_keys(data, TOP_FIELDS, _field_at(f"{source}: "))
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise ConfigError(f"expected an object, got {_type_name(defaults)}", where=f"{source}: defaults")
    _check_keys(defaults, SHARED_FIELDS, _field_at(f"{source}: defaults, "))
    raw_cases = data.get("cases")
    if not isinstance(raw_cases, list) or not raw_cases:
        raise ConfigError(
            f"expected a non-empty list of cases, got "
            f"{'nothing' if raw_cases is None else 'an empty list' if raw_cases == [] else _type_name(raw_cases)}",
            where=f"{source}: field 'cases'",
        )
    toks = _Tokenizers(base_dir)
    cases: list[Case] = []
    first_index: dict[str, int] = {}
    for i, raw in enumerate(raw_cases):
        case = _build_case(raw, i, defaults, source, toks)
        if case.case_id in first_index:
            raise ConfigError(
                f"duplicate id: case {first_index[case.case_id]} has the same id; ids name stored samples and must be unique",
                where=f"{source}: case {i} (id {case.case_id!r}), field 'id'",
            )
        first_index[case.case_id] = i
        cases.append(case)
    return cases


def parse_cases_text(text: str, *, fmt: str, source: str = "<cases>", base_dir: Path | None = None) -> list[Case]:
    """Cases from JSON or TOML text (``fmt`` is ``"json"`` or ``"toml"``)."""
    return parse_cases(_parse_text(text, source, fmt), source=source, base_dir=base_dir)


def load_cases(path: str | Path) -> list[Case]:
    """Cases from a ``.json`` or ``.toml`` file (other suffixes: sniffed; a TOML table header means TOML)."""
    path = Path(path)
    source = str(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read the cases file: {e.strerror or e}", where=source) from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"not UTF-8 text (byte {e.start})", where=source) from None
    suffix = path.suffix.lower()
    if suffix in (".json", ".toml"):
        fmt = suffix[1:]
    else:
        head = text.lstrip()
        toml_table = re.match(r"\[\[?\s*[A-Za-z0-9_\"'-]", head)  # [defaults] or [[cases]]
        fmt = "json" if head.startswith("{") or (head.startswith("[") and not toml_table) else "toml"
    return parse_cases_text(text, fmt=fmt, source=source, base_dir=path.parent)


def cases_document(cases: list[Case]) -> dict[str, Any]:
    """A cases-file document (``{"cases": [...]}``) for ``cases``, with token-id prompts: what
    :func:`parse_cases` reads back as the same cases (``text`` aside). For built-in cases whose
    prompts need a model's tokenizer (``smollm2_cases``) in tools that take a cases file."""
    out = []
    for c in cases:
        entry: dict[str, Any] = {"id": c.case_id, "prompt_ids": list(c.prompt_ids)}
        entry.update({k: v for k, v in c.params.to_dict().items() if k in PARAM_FIELDS})
        if c.params.tokenizer is not None:
            entry["tokenizer"] = c.params.tokenizer
        entry["batch_size"] = c.batch_size
        if c.companions:
            entry["companions"] = [list(x) for x in c.companions]
        if c.samples is not None:
            entry["samples"] = c.samples
        if c.tokenizer is not None:
            entry["tokenizer"] = c.tokenizer
        out.append(entry)
    return {"cases": out}


def default_cases() -> list[Case]:
    """The cases of a bare ``speceq run``: 6 cases over the bundled byte models.

    4 new tokens each (1 for the unbatched case); temperatures 1.0 and 0.7, one top-k and one
    top-p case. One case runs unbatched (batch size 1); two run at batch size 4, one of them
    with a longer companion prompt so that the case's own prompt is left-padded and
    acceptance is ragged; three run at batch size 32, two of them with companions of other
    lengths. Batch size 1 costs about 4x the CPU time per sample of batch size 4 and 15x that
    of batch size 32, so only one case uses it, and only for the first token (the exact
    single-step law of the speculative sampler, certified against the oracle's exact law).
    """
    from speceq.models.prompts import DEFAULT_PROMPTS
    from speceq.models.tokenizer import ByteTokenizer

    tok = ByteTokenizer()
    P = DEFAULT_PROMPTS

    def case(cid: str, prompt: str, *, batch_size: int = 1, companions: tuple[str, ...] = (), tokens: int = 4,
             **params: Any) -> Case:
        return Case(
            case_id=cid,
            prompt_ids=tuple(tok.encode(prompt)),
            params=SamplingParams(max_new_tokens=tokens, **params),
            batch_size=batch_size,
            companions=tuple(tuple(tok.encode(c)) for c in companions),
            text=prompt,
        )

    return [
        case("def-b1", P[0], temperature=1.0, tokens=1),
        case("for-range-b4-ragged", P[1], temperature=1.0, batch_size=4, companions=(P[8],)),
        case("import-topk-b4", P[4], temperature=1.0, top_k=10, batch_size=4),
        case("init-self-t07-b32", P[2], temperature=0.7, batch_size=32, companions=(P[10],)),
        case("elif-topp-b32", P[5], temperature=1.0, top_p=0.9, batch_size=32),
        case("self-attr-ragged-b32", P[7], temperature=1.0, batch_size=32, companions=(P[0], P[10])),
    ]


def bpe_cases() -> list[Case]:
    """The cases of ``speceq run --models bpe``: 7 cases over the BPE models, 4 new tokens each.

    The byte world's shapes (one unbatched first-token case; batch 4 with and without a longer
    companion; batch 32 with companions; T = 1.0 and 0.7; top-k 50 and top-p 0.9), with text
    prompts encoded by the BPE tokenizer, plus two cases on EOS-prone prompts: the last 16
    lines of held-out files (``BPE_EOS_PROMPTS``), where the target, after its ``<eos>`` refit,
    gives ``<eos>`` 0.75-0.78 as the next token (``bpe-metrics.json``, ``eos_mass``).
    ``bpe-eos-b32`` lets rows end early at EOS id 31998; ``bpe-ignore-eos-t07-b4`` sets
    ``ignore_eos``, which masks that likely EOS in every engine and the oracle.
    """
    from speceq.models.bpe import BPE_EOS_PROMPTS, BPE_PROMPTS, load_bpe_tokenizer

    tok = load_bpe_tokenizer()
    P, E = BPE_PROMPTS, BPE_EOS_PROMPTS

    def ids(text: str) -> tuple[int, ...]:
        return tuple(tok.encode(text).ids)

    def case(cid: str, prompt: str, *, batch_size: int = 1, companions: tuple[str, ...] = (), tokens: int = 4,
             **params: Any) -> Case:
        return Case(
            case_id=cid,
            prompt_ids=ids(prompt),
            params=SamplingParams(max_new_tokens=tokens, **params),
            batch_size=batch_size,
            companions=tuple(ids(c) for c in companions),
            text=prompt,
            tokenizer="bpe",
        )

    return [
        case("bpe-def-b1", P[0], temperature=1.0, tokens=1),
        case("bpe-import-b4-ragged", P[1], temperature=1.0, batch_size=4, companions=(P[2],)),
        case("bpe-raise-topk-b4", P[3], temperature=1.0, top_k=50, batch_size=4),
        case("bpe-repr-t07-b32", P[2], temperature=0.7, batch_size=32, companions=(P[4],)),
        case("bpe-class-topp-b32", P[4], temperature=1.0, top_p=0.9, batch_size=32),
        case("bpe-eos-b32", E[0], temperature=1.0, batch_size=32, companions=(P[5], E[2])),
        case("bpe-ignore-eos-t07-b4", E[1], temperature=0.7, batch_size=4, companions=(P[0],), ignore_eos=True),
    ]


def smollm2_cases(cache: str | Path | None = None) -> list[Case]:
    """The cases of ``speceq run --models smollm2``: 4 chat cases on SmolLM2-135M-Instruct.

    Chats (``speceq.models.smollm2.CHATS``: one worked example turn, then the question) rendered
    with the model's chat template, so most answers are a word or two and end at ``<|im_end|>``:
    T = 1.0 at batch 64 with a longer companion chat (left padding, ragged acceptance); T = 0.7
    with top-p 0.9 at batch 64; greedy at batch 8 with the companion (64 rows, which the
    row-mismatch bound certifies at alpha 1e-3); and T = 1.0 unbatched, 2 tokens, 600 samples (the
    PIT-law bound over 2 positions needs ~540), the case the one-row-at-a-time engines
    (``hf-assisted``, ``hf-prompt-lookup``) can afford. Needs
    ``speceq smollm2 prepare`` (ConfigError saying so otherwise); ``cache``: its
    cache root (default ``$SPECEQ_CACHE`` or ``~/.cache/speceq``).
    """
    from speceq.models.smollm2 import CHATS, prepared

    folder = prepared(cache).target
    render = _chat_renderer(folder, "smollm2 cases")
    # the portable name resolves in the default cache; cases of another cache name their folder
    tokenizer = "smollm2" if cache is None else str(folder)

    def chat(name: str) -> tuple[int, ...]:
        return tuple(render([dict(m) for m in CHATS[name]])[0])

    def case(cid: str, name: str, *, batch_size: int = 1, companions: tuple[str, ...] = (), tokens: int = 6,
             samples: int | None = None, **params: Any) -> Case:
        return Case(case_id=cid, prompt_ids=chat(name), params=SamplingParams(max_new_tokens=tokens, **params),
                    batch_size=batch_size, companions=tuple(chat(c) for c in companions),
                    text=render([dict(m) for m in CHATS[name]])[1], samples=samples, tokenizer=tokenizer)

    return [
        case("smol-capital-t1-b64-ragged", "capital", temperature=1.0, batch_size=64, companions=("repeat",)),
        case("smol-animal-t07-topp09-b64", "animal", temperature=0.7, top_p=0.9, batch_size=64),
        case("smol-capital-greedy-b8-ragged", "capital", temperature=0.0, batch_size=8, companions=("repeat",),
             samples=64),
        case("smol-repeat-t1-b1", "repeat", temperature=1.0, tokens=2, samples=600),
    ]
