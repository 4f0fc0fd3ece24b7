"""The engine contract: one small Protocol, a request and a batch of samples.

An engine turns a :class:`SampleRequest` into a :class:`SampleBatch`. It knows nothing of
statistics. Rows are laid out by :func:`row_layout`: ``n`` samples of every prompt,
interleaved (prompt 0, prompt 1, ..., prompt 0, prompt 1, ...), then cut into batches of
``batch_size`` rows, so that each batch mixes prompts of different lengths.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from speceq.core.params import EXTRA_DEFAULTS, PROFILES, SamplingParams
from speceq.errors import ConfigError, EngineError

#: Fill value of ``SampleBatch.tokens`` after the end of a row.
PAD_OUT = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class SampleRequest:
    """What an engine is asked to sample.

    prompts: token-id lists; ``n`` samples are drawn for each. ``seed`` fixes every random
    draw of the request. ``batch_size`` is the number of rows per forward batch.
    """

    prompts: tuple[tuple[int, ...], ...]
    params: SamplingParams
    n: int
    seed: int
    batch_size: int = 1

    def rows(self) -> np.ndarray:
        """Prompt index of every row, in the order the engine must return them."""
        return row_layout(len(self.prompts), self.n)


def row_layout(num_prompts: int, n: int) -> np.ndarray:
    """Prompt index per row: n rounds of (0, 1, ..., num_prompts-1)."""
    return np.tile(np.arange(num_prompts, dtype=np.int64), n)


@dataclass(frozen=True, slots=True, kw_only=True)
class SampleBatch:
    """Samples returned by an engine.

    tokens: int64 ``[rows, max_new_tokens]``, generated ids only (no prompt), filled with
    ``PAD_OUT`` after each row's end; an EOS token, when generated, is the last counted token.
    lengths: int64 ``[rows]``, generated tokens per row (EOS included).
    prompt_index: int64 ``[rows]``, which request prompt each row continues.
    drafted_tokens / accepted_tokens: speculative engines only, totals over the request.
    wall_time_s: seconds spent sampling (engine's own clock), when measured.
    """

    tokens: np.ndarray
    lengths: np.ndarray
    prompt_index: np.ndarray
    drafted_tokens: int | None = None
    accepted_tokens: int | None = None
    verify_steps: int | None = None
    wall_time_s: float | None = None
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def acceptance_rate(self) -> float | None:
        if not self.drafted_tokens or self.accepted_tokens is None:
            return None
        return self.accepted_tokens / self.drafted_tokens

    def row_tokens(self, i: int) -> list[int]:
        return [int(t) for t in self.tokens[i, : int(self.lengths[i])]]


def batch_from_lists(
    rows: list[list[int]], prompt_index: np.ndarray, max_new_tokens: int, **extra: Any
) -> SampleBatch:
    """Pack per-row token lists into a padded SampleBatch."""
    tokens = np.full((len(rows), max_new_tokens), PAD_OUT, dtype=np.int64)
    lengths = np.zeros(len(rows), dtype=np.int64)
    for i, r in enumerate(rows):
        if len(r) > max_new_tokens:
            raise EngineError(f"row {i} has {len(r)} tokens, more than max_new_tokens={max_new_tokens}")
        tokens[i, : len(r)] = r
        lengths[i] = len(r)
    return SampleBatch(tokens=tokens, lengths=lengths, prompt_index=np.asarray(prompt_index, dtype=np.int64), **extra)


@runtime_checkable
class Engine(Protocol):
    """A sampler under test (or the baseline).

    ``name`` identifies it in results; ``vocab_size`` and ``eos_token_id`` let the harness
    validate output; ``describe()`` returns a JSON-able configuration for provenance (no
    secrets); ``sample()`` draws the samples of one request.
    """

    name: str
    vocab_size: int
    eos_token_id: int | None

    def describe(self) -> dict[str, Any]: ...

    def sample(self, request: SampleRequest) -> SampleBatch: ...


#: Every request field beyond temperature / top-k / top-p, in every processing order: what an engine that
#: processes logits with :func:`speceq.core.processing.process_logits` itself declares as ``sampling_fields``.
ALL_SAMPLING_FIELDS: Mapping[str, tuple[str, ...]] = {name: PROFILES for name in EXTRA_DEFAULTS}


def sampling_fields(engine: Any) -> Mapping[str, tuple[str, ...]]:
    """The request fields ``engine`` applies: field -> processing orders it applies it in.

    An engine declares them as a ``sampling_fields`` attribute (a mapping like
    :data:`ALL_SAMPLING_FIELDS`); an engine that declares nothing applies none of them, so a case
    that sets one is refused rather than silently sampled without it.
    """
    declared = getattr(engine, "sampling_fields", None)
    return dict(declared) if isinstance(declared, Mapping) else {}


def refused_field_reasons(engine: Any) -> Mapping[str, str]:
    """Why ``engine`` cannot apply some request fields: field -> reason, from its optional ``refused_fields``
    attribute (a mapping), quoted in the refusal of :func:`check_sampling_support`; empty when it has none."""
    declared = getattr(engine, "refused_fields", None)
    return dict(declared) if isinstance(declared, Mapping) else {}


def check_sampling_support(engine: Any, params: SamplingParams, case_id: str, *, role: str | None = None) -> None:
    """ConfigError naming the case, the field and the engine when ``engine`` cannot apply a field ``params``
    sets (in ``params.processing``'s order), with the engine's reason when it gives one
    (:func:`refused_field_reasons`). Called before any sampling."""
    declared = sampling_fields(engine)
    reasons = refused_field_reasons(engine)
    name = getattr(engine, "name", type(engine).__name__)
    who = f"the {role} engine {name!r}" if role else f"engine {name!r}"
    for field_name in params.extra_fields:
        orders = declared.get(field_name, ())
        if params.processing in orders:
            continue
        if orders:
            msg = (f"{who} applies {field_name} only in the processing order(s) {', '.join(map(repr, orders))}, "
                   f"not {params.processing!r}: set 'processing' or use another engine")
        elif field_name in reasons:
            msg = (f"{who} cannot apply {field_name} ({reasons[field_name]}): drop the field from this case or use "
                   "an engine that applies it")
        else:
            msg = (f"{who} cannot apply {field_name} (it declares no such sampling field), so its rows would "
                   "silently ignore it: drop the field from this case or use an engine that applies it")
        raise ConfigError(msg, where=f"case {case_id!r}.{field_name}")


def validate_batch(
    batch: SampleBatch, request: SampleRequest, engine: Engine, case_id: str | None = None, *, role: str | None = None
) -> None:
    """Check an engine's output against the contract; raise EngineError saying what broke.

    ``role`` ("baseline" / "candidate") lets vocabulary and EOS errors name the CLI option
    that fixes them (``--candidate-option vocab_size=...``).
    """
    from speceq.models.vocab import option_hint, source_note

    name = getattr(engine, "name", type(engine).__name__)
    expected_rows = len(request.prompts) * request.n
    L = request.params.max_new_tokens

    def fail(msg: str) -> EngineError:
        return EngineError(msg, engine=name, case_id=case_id)

    if not isinstance(batch, SampleBatch):
        raise fail(f"sample() returned {type(batch).__name__}, expected SampleBatch")
    tok, lens = batch.tokens, batch.lengths
    if not (isinstance(tok, np.ndarray) and tok.ndim == 2 and np.issubdtype(tok.dtype, np.integer)):
        raise fail(f"tokens must be a 2-D integer array, got {getattr(tok, 'shape', None)} {getattr(tok, 'dtype', type(tok))}")
    if tok.shape != (expected_rows, L):
        raise fail(f"tokens has shape {tok.shape}, expected ({expected_rows}, {L}) = (prompts x n, max_new_tokens)")
    if not (isinstance(lens, np.ndarray) and lens.shape == (expected_rows,)):
        raise fail(f"lengths has shape {getattr(lens, 'shape', None)}, expected ({expected_rows},)")
    if not np.array_equal(np.asarray(batch.prompt_index), request.rows()):
        raise fail("prompt_index does not follow the row layout (n rounds of every prompt in order)")
    if (lens < 1).any() or (lens > L).any():
        i = int(np.flatnonzero((lens < 1) | (lens > L))[0])
        raise fail(f"row {i} has length {int(lens[i])}, expected 1..{L}")
    pos = np.arange(L)[None, :]
    inside = pos < lens[:, None]
    body = tok[inside]
    if body.size and ((body < 0).any() or (body >= engine.vocab_size).any()):
        bad = np.argwhere(inside & ((tok < 0) | (tok >= engine.vocab_size)))[0]
        t = int(tok[bad[0], bad[1]])
        who = f"the {role}'s" if role else "the engine's"
        fix = f"; {option_hint(role, 'vocab_size', '<the model vocabulary size>', engine)}" if t >= 0 else ""
        raise fail(
            f"token {t} (row {bad[0]}, prompt index {int(request.rows()[bad[0]])}, position {bad[1]}) is outside "
            f"{who} vocabulary ({engine.vocab_size}{source_note(engine, 'vocab_size')}){fix}"
        )
    if (tok[~inside] != PAD_OUT).any():
        raise fail(f"tokens after each row's length must be {PAD_OUT}")
    prompts = max(1, len(request.prompts))

    def row_name(r: int) -> str:  # rows are n rounds of every prompt (row_layout)
        return f"row {r} (prompt {r % prompts}, sample {r // prompts})"

    stop_len = _stop_lengths(tok, lens, request.params)
    if stop_len is not None:
        over = np.flatnonzero((stop_len > 0) & (stop_len < lens))
        if over.size:
            r = int(over[0])
            raise fail(f"{row_name(r)} continues after a stop string completed at position {int(stop_len[r]) - 1}: "
                       f"it goes on to position {int(lens[r]) - 1} (a row must end at the token that completes "
                       f"its first stop string, stop={list(request.params.stop)!r})")
    eos = engine.eos_token_id
    if eos is not None:
        eos_label = f"EOS id {eos}"
        default_note = " (the bundled byte model's default)" if source_note(engine, "eos_token_id") else ""
        fix = option_hint(role, "eos_token_id", "<the model's EOS id>", engine)
        is_eos = (tok == eos) & inside
        if request.params.ignore_eos and is_eos.any():
            r, p = (int(x) for x in np.argwhere(is_eos)[0])
            raise fail(f"{row_name(r)} holds the {eos_label} at position {p} although ignore_eos is set "
                       f"(the engine must mask EOS and generate exactly max_new_tokens tokens; if {eos}{default_note} is "
                       f"not the model's EOS, {fix})")
        if not request.params.ignore_eos:
            eos_before_end = is_eos & (pos < (lens[:, None] - 1))
            if eos_before_end.any():
                r, p = (int(x) for x in np.argwhere(eos_before_end)[0])
                raise fail(f"{row_name(r)} continues after the {eos_label} at position {p}: it goes on to position "
                           f"{int(lens[r]) - 1} (a row must end at its first EOS; if {eos}{default_note} is not the "
                           f"model's EOS, {fix})")
            last = tok[np.arange(expected_rows), lens - 1]
            early = (lens < L) & (last != eos)
            if stop_len is not None:
                early &= stop_len != lens  # ended by a stop string
            if early.any():
                r = int(np.flatnonzero(early)[0])
                raise fail(f"{row_name(r)} stops after {int(lens[r])} of max_new_tokens={L} tokens without the "
                           f"{eos_label}{default_note} (its last token is {int(last[r])}): truncated output, or a "
                           f"different EOS id? (if {int(last[r])} is the model's EOS, "
                           f"{option_hint(role, 'eos_token_id', int(last[r]), engine)})")


def _stop_lengths(tok: np.ndarray, lens: np.ndarray, params: SamplingParams) -> np.ndarray | None:
    """Per row, the length at which its first stop string completes (0: none); None without ``stop``."""
    if not params.stop:
        return None
    from speceq.core.stops import first_stop
    from speceq.models.text_decoding import row_decoder

    decode = row_decoder(params.tokenizer or "")
    out = np.zeros(len(lens), dtype=np.int64)
    for r in range(len(lens)):
        match = first_stop([int(t) for t in tok[r, : int(lens[r])]], decode, params.stop)
        out[r] = 0 if match is None else match.length
    return out


def checked_prefixes(prefixes: Any, vocab_size: int, *, what: str, scorer: str) -> list[list[int]]:
    """``prefixes`` as lists of ints; ConfigError (where: ``oracle <what> <row>``) for an empty prefix
    or a token outside ``[0, vocab_size)``. ``scorer`` names who needs the tokens (in the message)."""
    out = []
    for i, s in enumerate(prefixes):
        s = [int(t) for t in s]
        if not s:
            raise ConfigError(f"empty prefix: {scorer} needs at least one token", where=f"oracle {what} {i}")
        bad = [t for t in s if not (0 <= t < vocab_size)]
        if bad:
            raise ConfigError(f"token {bad[0]} is outside the vocabulary [0, {vocab_size})", where=f"oracle {what} {i}")
        out.append(s)
    return out


def checked_rows(prompts: list[list[int]], batch: SampleBatch, vocab_size: int) -> list[tuple[list[int], list[int]]]:
    """(prompt, generated tokens) of every row of ``batch``; ConfigError (where: ``oracle row <r>``) for a
    prompt index outside ``prompts`` or a generated token outside ``[0, vocab_size)``."""
    out = []
    for r in range(batch.rows):
        pi = int(batch.prompt_index[r])
        if not 0 <= pi < len(prompts):
            raise ConfigError(f"prompt_index {pi} is outside the {len(prompts)} prompts", where=f"oracle row {r}")
        gen = batch.row_tokens(r)
        bad = [t for t in gen if not (0 <= t < vocab_size)]
        if bad:
            raise ConfigError(f"generated token {bad[0]} is outside the vocabulary [0, {vocab_size})",
                              where=f"oracle row {r}")
        out.append((prompts[pi], gen))
    return out
