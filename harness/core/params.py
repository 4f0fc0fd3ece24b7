"""Sampling parameters: how one equivalence check samples (temperature, top-k, top-p, length, EOS).

Validation raises :class:`~speceq.errors.ConfigError` naming the field. A case (prompt,
parameters and batch context) is :class:`speceq.inputs.cases.Case`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from speceq.errors import ConfigError


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplingParams:
    """Sampling parameters shared by baseline, candidate and oracle.

    Processing order (see :mod:`speceq.core.processing`): temperature, then top-k, then top-p,
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
