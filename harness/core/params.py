"""Sampling parameters: how one equivalence check samples.

Temperature, top-k, top-p, length and EOS, plus the request fields production servers take
with their OpenAI / vLLM names and meanings: ``min_p``, ``repetition_penalty`` (over prompt
and generated tokens), ``presence_penalty`` and ``frequency_penalty`` (over generated tokens),
``logit_bias`` (token id -> bias added to the logit), ``processing``, the named order in
which they are applied (:mod:`speceq.core.processing`), ``stop`` (strings that end a row, matched
on its text decoded with ``tokenizer``; :mod:`speceq.core.stops`) with
``include_stop_str_in_output``, ``seed`` (the case's own seed, for engines that honour
per-request seeds) and ``structured_outputs`` (a regex, JSON schema, choice list or EBNF grammar every
row must follow; :mod:`speceq.models.grammar`).

Validation raises :class:`~speceq.errors.ConfigError` naming the field. A case (prompt,
parameters and batch context) is :class:`speceq.inputs.cases.Case`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from speceq.errors import ConfigError

#: Named processing orders (see :mod:`speceq.core.processing`); the first is the default.
PROFILES: tuple[str, ...] = ("vllm", "hf")
#: The fields beyond temperature / top-k / top-p / length / EOS, with their "off" values. An
#: engine applies one only when it declares it (:func:`speceq.engines.base.check_sampling_support`).
EXTRA_DEFAULTS: dict[str, Any] = {
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "logit_bias": (),
    "stop": (),
    "include_stop_str_in_output": False,
    "seed": None,
    "structured_outputs": None,
}
#: The kinds of ``structured_outputs`` (vLLM's names), each with what its value is.
STRUCTURED_KINDS: dict[str, str] = {
    "regex": "a regular expression (a string)",
    "json": "a JSON schema (an object, or its JSON text)",
    "choice": "a list of strings",
    "grammar": "an EBNF grammar (GBNF or Lark text)",
}
#: Range of presence_penalty and frequency_penalty (OpenAI's and vLLM's).
PENALTY_RANGE = (-2.0, 2.0)
#: Range of one logit_bias value (OpenAI's).
BIAS_RANGE = (-100.0, 100.0)
#: A case's ``seed`` lies in [0, SEED_LIMIT).
SEED_LIMIT = 2**63


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplingParams:
    """Sampling parameters shared by baseline, candidate and oracle.

    Processing (see :mod:`speceq.core.processing` for both orders): with the default
    ``processing="vllm"``: logit_bias, repetition, frequency, presence penalties, then
    temperature, min_p, top-k, top-p, on the target's logits. ``temperature == 0`` means
    greedy (argmax of the biased, penalised logits). ``top_k == 0``, ``top_p == 1.0`` and
    ``min_p == 0`` disable truncation; ``repetition_penalty == 1``, ``presence_penalty ==
    frequency_penalty == 0`` and an empty ``logit_bias`` disable those. ``max_new_tokens``
    counts generated tokens, EOS included. With ``ignore_eos`` every row has exactly
    ``max_new_tokens`` tokens and EOS is never sampled (its logit is masked).

    ``logit_bias`` accepts a mapping {token id: bias} (ids as ints or decimal strings, as JSON
    writes them) and is stored as sorted ``(id, bias)`` pairs so the parameters stay hashable.

    ``stop`` (a string or a list of strings, stored as a tuple): a row ends at the first token
    after which its generated text (decoded with ``tokenizer``, special tokens skipped) contains
    one of them; that token is the row's last, as an EOS is. Its tokens are the same whatever
    ``include_stop_str_in_output`` says; that flag says whether the row's *text*
    (:func:`speceq.core.stops.stop_text`) keeps the stop string (vLLM's flag, default false).
    ``tokenizer``: the name (``bytes``, ``bpe``, ``smollm2``) or absolute path of the tokenizer
    that decodes rows; required with ``stop``.

    ``seed``: the case's own seed. A run derives the case's request seeds from it instead of the
    run's seed (:func:`speceq.pipeline.plan.case_run_seed`), so two runs of the case with the same
    ``seed`` ask for the same draws; an engine that honours per-request seeds (declares ``seed``
    in ``sampling_fields``) then gives the same rows. None: the run's seed.

    ``structured_outputs``: ``{"regex": ...}``, ``{"json": <JSON schema>}``, ``{"choice": [...]}`` or
    ``{"grammar": <EBNF>}`` (vLLM's request field): at each position the processed law is masked to the
    tokens the grammar allows after the row's own tokens so far (EOS only once the grammar is complete).
    Stored as ``(kind, text)`` (a schema and a choice list as canonical JSON text) so the parameters stay
    hashable; needs ``tokenizer`` (the grammar matches text) and refuses ``ignore_eos`` (a finished grammar
    allows only EOS).
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    max_new_tokens: int = 8
    ignore_eos: bool = False
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    processing: str = "vllm"
    stop: tuple[str, ...] = ()
    include_stop_str_in_output: bool = False
    seed: int | None = None
    tokenizer: str | None = None
    structured_outputs: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "logit_bias", _bias_pairs(self.logit_bias))
        object.__setattr__(self, "structured_outputs", _structured_pair(self.structured_outputs))
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        elif isinstance(self.stop, list):
            object.__setattr__(self, "stop", tuple(self.stop))
        validate_params(self)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def extra_fields(self) -> tuple[str, ...]:
        """The fields beyond temperature / top-k / top-p this request sets (not at their "off" value)."""
        return tuple(name for name, off in EXTRA_DEFAULTS.items() if getattr(self, name) != off)

    @property
    def uses_history(self) -> bool:
        """Whether the processed law depends on the row's tokens so far (a penalty or a grammar is on)."""
        return (self.repetition_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0
                or self.structured_outputs is not None)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able fields; the extra fields and ``processing`` only when set (so that the stored
        form of a case without them, and every fingerprint made of it, is what it always was)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in EXTRA_DEFAULTS and v == EXTRA_DEFAULTS[f.name]:
                continue
            if f.name == "processing" and v == PROFILES[0]:
                continue
            if f.name == "tokenizer" and v is None:
                continue
            if f.name == "stop":
                v = list(v)
            if f.name == "structured_outputs":
                v = structured_value(v)
            out[f.name] = {str(t): b for t, b in v} if f.name == "logit_bias" else v
        return out

    def label(self) -> str:
        """Short human label, e.g. ``T=0.7 top_k=20``."""
        parts = ["greedy" if self.greedy else f"T={self.temperature:g}"]
        if self.top_k:
            parts.append(f"top_k={self.top_k}")
        if self.top_p < 1.0:
            parts.append(f"top_p={self.top_p:g}")
        for name in ("min_p", "repetition_penalty", "presence_penalty", "frequency_penalty"):
            if getattr(self, name) != EXTRA_DEFAULTS[name]:
                parts.append(f"{name}={getattr(self, name):g}")
        if self.logit_bias:
            parts.append(f"logit_bias={len(self.logit_bias)}")
        if self.processing != PROFILES[0]:
            parts.append(f"processing={self.processing}")
        if self.stop:
            parts.append(f"stop={len(self.stop)}" + ("+text" if self.include_stop_str_in_output else ""))
        if self.seed is not None:
            parts.append(f"seed={self.seed}")
        if self.structured_outputs is not None:
            parts.append(f"structured={self.structured_outputs[0]}")
        parts.append(f"len={self.max_new_tokens}")
        if self.ignore_eos:
            parts.append("ignore_eos")
        return " ".join(parts)


def _bias_pairs(value: Any) -> Any:
    """``logit_bias`` as sorted (id, bias) pairs; a value of the wrong shape is left for validation."""
    if isinstance(value, Mapping):
        items = list(value.items())
    elif isinstance(value, (tuple, list)) and all(isinstance(x, (tuple, list)) and len(x) == 2 for x in value):
        items = [tuple(x) for x in value]
    else:
        return value
    out = []
    for t, b in items:
        if isinstance(t, str) and t.strip().isdigit():
            t = int(t)
        if isinstance(b, (int, float)) and not isinstance(b, bool):
            b = float(b)
        out.append((t, b))
    try:
        return tuple(sorted(out))
    except TypeError:  # mixed key types: validation names the bad key
        return tuple(out)


def _structured_pair(value: Any) -> Any:
    """``structured_outputs`` as ``(kind, text)``; a value of the wrong shape is left for validation."""
    if not isinstance(value, Mapping) or len(value) != 1:
        return value
    ((kind, v),) = value.items()
    if kind == "json" and isinstance(v, Mapping):
        try:
            v = json.dumps(v, sort_keys=True, separators=(",", ":"))
        except (TypeError, ValueError):
            return value
    elif kind == "choice" and isinstance(v, (list, tuple)):
        v = json.dumps(list(v)) if all(isinstance(x, str) for x in v) else None
    return (kind, v)


def structured_value(pair: tuple[str, str]) -> dict[str, Any]:
    """The request form ``{kind: value}`` of a stored ``structured_outputs`` pair (a schema as an object,
    a choice as a list), as a cases file and vLLM's request take it."""
    kind, text = pair
    if kind in ("json", "choice"):
        try:
            return {kind: json.loads(text)}
        except ValueError:
            return {kind: text}
    return {kind: text}


def validate_params(p: SamplingParams, where: str | None = None) -> None:
    """Raise ConfigError naming the field when a sampling parameter is out of range."""

    def bad(fieldname: str, msg: str) -> ConfigError:
        return ConfigError(msg, where=f"{where}.{fieldname}" if where else fieldname)

    def number(v: Any) -> bool:
        return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)

    if isinstance(p.temperature, bool) or not isinstance(p.temperature, (int, float)):
        raise bad("temperature", f"expected a number >= 0, got {p.temperature!r}")
    if not math.isfinite(p.temperature) or p.temperature < 0:
        raise bad("temperature", f"expected a finite number >= 0 (0 = greedy), got {p.temperature!r}")
    if isinstance(p.top_k, bool) or not isinstance(p.top_k, int) or p.top_k < 0:
        raise bad("top_k", f"expected an integer >= 0 (0 = off), got {p.top_k!r}")
    if isinstance(p.top_p, bool) or not isinstance(p.top_p, (int, float)) or not (0.0 < p.top_p <= 1.0):
        raise bad("top_p", f"expected a number in (0, 1] (1 = off), got {p.top_p!r}")
    if isinstance(p.max_new_tokens, bool) or not isinstance(p.max_new_tokens, int) or p.max_new_tokens <= 0:
        raise bad("max_new_tokens", f"expected an integer >= 1, got {p.max_new_tokens!r}")
    if not isinstance(p.ignore_eos, bool):
        raise bad("ignore_eos", f"expected true or false, got {p.ignore_eos!r}")
    if not number(p.min_p) or not 0.0 <= p.min_p <= 1.0:
        raise bad("min_p", f"expected a number in [0, 1] (0 = off), got {p.min_p!r}")
    if not number(p.repetition_penalty) or p.repetition_penalty <= 0:
        raise bad("repetition_penalty", f"expected a number > 0 (1 = off), got {p.repetition_penalty!r}")
    lo, hi = PENALTY_RANGE
    for name in ("presence_penalty", "frequency_penalty"):
        v = getattr(p, name)
        if not number(v) or not lo <= v <= hi:
            raise bad(name, f"expected a number in [{lo:g}, {hi:g}] (0 = off), got {v!r}")
    if not isinstance(p.logit_bias, tuple):
        raise bad("logit_bias", f"expected an object {{token id: bias}}, got {p.logit_bias!r}")
    seen: set[int] = set()
    blo, bhi = BIAS_RANGE
    for t, b in p.logit_bias:
        if isinstance(t, bool) or not isinstance(t, int) or t < 0:
            raise bad("logit_bias", f"key {t!r} is not a token id (expected an integer >= 0)")
        if t in seen:
            raise bad("logit_bias", f"token id {t} is given twice")
        seen.add(t)
        if not number(b) or not blo <= b <= bhi:
            raise bad("logit_bias", f"the bias of token {t} is {b!r}; expected a number in [{blo:g}, {bhi:g}]")
    if not isinstance(p.stop, tuple) or not all(isinstance(x, str) for x in p.stop):
        raise bad("stop", f"expected a string or a list of strings, got {p.stop!r}")
    for i, x in enumerate(p.stop):
        if not x:
            raise bad("stop", f"stop string {i} is empty; every stop string needs at least one character")
        if x in p.stop[:i]:
            raise bad("stop", f"stop string {x!r} is given twice")
    if not isinstance(p.include_stop_str_in_output, bool):
        raise bad("include_stop_str_in_output", f"expected true or false, got {p.include_stop_str_in_output!r}")
    if p.tokenizer is not None and (not isinstance(p.tokenizer, str) or not p.tokenizer):
        raise bad("tokenizer", f"expected a tokenizer name or path, got {p.tokenizer!r}")
    if p.seed is not None and (isinstance(p.seed, bool) or not isinstance(p.seed, int)
                               or not 0 <= p.seed < SEED_LIMIT):
        raise bad("seed", f"expected an integer in [0, 2**63) (or nothing: the run's seed), got {p.seed!r}")
    if p.stop and p.tokenizer is None:
        raise bad("stop", "stop strings are matched on each row's decoded text, so the case needs a tokenizer "
                  "(set 'tokenizer': bytes, bpe, smollm2 or a tokenizer.json path)")
    if p.structured_outputs is not None:
        so = p.structured_outputs
        kinds = ", ".join(STRUCTURED_KINDS)
        if not (isinstance(so, tuple) and len(so) == 2 and isinstance(so[0], str)):
            raise bad("structured_outputs", f"expected an object with exactly one of {kinds}, got {so!r}")
        kind, text = so
        if kind not in STRUCTURED_KINDS:
            raise bad("structured_outputs", f"unknown kind {kind!r}; expected exactly one of {kinds}")
        if not isinstance(text, str) or not text.strip():
            raise bad("structured_outputs", f"{kind} must be {STRUCTURED_KINDS[kind]}, got {text!r}")
        if kind == "json":
            try:
                schema = json.loads(text)
            except ValueError as e:
                raise bad("structured_outputs", f"the json schema is not valid JSON: {e}") from None
            if not isinstance(schema, (dict, bool)):
                raise bad("structured_outputs", f"the json schema must be an object, got {text!r}")
        if kind == "choice":
            try:
                options = json.loads(text)
            except ValueError:
                options = None
            if not isinstance(options, list) or not options or not all(isinstance(x, str) and x for x in options):
                raise bad("structured_outputs", f"choice must be a non-empty list of non-empty strings, got {text!r}")
        if p.tokenizer is None:
            raise bad("structured_outputs", "the grammar matches each row's text, so the case needs a tokenizer "
                      "(set 'tokenizer': bytes, bpe, smollm2 or a tokenizer.json path)")
        if p.ignore_eos:
            raise bad("structured_outputs", "ignore_eos cannot be combined with a grammar (a complete grammar "
                      "allows only EOS); leave ignore_eos out")
    if p.processing not in PROFILES:
        raise bad("processing", f"expected one of {', '.join(map(repr, PROFILES))}, got {p.processing!r}")
    if p.processing == "hf" and (p.presence_penalty or p.frequency_penalty):
        name = "presence_penalty" if p.presence_penalty else "frequency_penalty"
        raise bad(name, "the 'hf' processing order has no presence or frequency penalty (transformers has none); "
                  "use processing 'vllm'")
