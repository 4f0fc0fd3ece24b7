"""Sampling parameters and cases: what one equivalence check samples.

A :class:`Case` is one prompt (token ids), its sampling parameters and its batch context
(batch size and the companion prompts that share a batch with it, so that padding and
ragged acceptance are exercised). Validation raises :class:`~speceq.errors.ConfigError`
naming the case and the field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from speceq.errors import ConfigError


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplingParams:
    """Sampling parameters shared by baseline, candidate and oracle.

    Processing order (see :mod:`speceq.processing`): temperature, then top-k, then top-p,
    on the target's logits. ``temperature == 0`` means greedy (argmax). ``top_k == 0`` and
    ``top_p == 1.0`` disable truncation. ``max_new_tokens`` counts generated tokens, EOS
    included. With ``ignore_eos`` every row has exactly ``max_new_tokens`` tokens and EOS is
    never sampled (its logit is masked).
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    max_new_tokens: int = 8
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        validate_params(self)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def label(self) -> str:
        """Short human label, e.g. ``T=0.7 top_k=20``."""
        parts = ["greedy" if self.greedy else f"T={self.temperature:g}"]
        if self.top_k:
            parts.append(f"top_k={self.top_k}")
        if self.top_p < 1.0:
            parts.append(f"top_p={self.top_p:g}")
        parts.append(f"len={self.max_new_tokens}")
        if self.ignore_eos:
            parts.append("ignore_eos")
        return " ".join(parts)


def validate_params(p: SamplingParams, where: str | None = None) -> None:
    """Raise ConfigError naming the field when a sampling parameter is out of range."""

    def bad(fieldname: str, msg: str) -> ConfigError:
        return ConfigError(msg, where=f"{where}.{fieldname}" if where else fieldname)

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


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    """One equivalence check: a prompt, its parameters and its batch context.

    ``prompt_ids`` are token ids of the target's vocabulary. ``companions`` are other
    prompts (token ids) that share each batch with this one, so a batch holds rows of
    different lengths. ``batch_size`` is the number of rows per engine batch.
    ``text`` keeps the prompt text when the case was written as text (display only).
    ``samples`` overrides the run's samples per engine for this case (e.g. fewer for an
    expensive unbatched case); None uses the run's.
    """

    case_id: str
    prompt_ids: tuple[int, ...]
    params: SamplingParams = field(default_factory=SamplingParams)
    batch_size: int = 1
    companions: tuple[tuple[int, ...], ...] = ()
    text: str | None = None
    samples: int | None = None

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
        """Raise ConfigError when a token id is outside ``[0, vocab_size)``."""
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
        }


def params_from_mapping(d: Mapping[str, Any], where: str) -> SamplingParams:
    """Build SamplingParams from a mapping, naming unknown keys."""
    known = set(SamplingParams.__dataclass_fields__)
    unknown = sorted(set(d) - known)
    if unknown:
        raise ConfigError(f"unknown field(s) {unknown}; expected some of {sorted(known)}", where=where)
    try:
        return SamplingParams(**d)
    except ConfigError as e:
        raise ConfigError(str(e), where=where) from None


def companion_ids(companions: Sequence[Sequence[int]]) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(int(t) for t in c) for c in companions)
