"""Coercion of engine options, which arrive as strings from the CLI's ``key=value`` pairs."""

from __future__ import annotations

from typing import Any

from speceq.errors import ConfigError


def as_int(value: Any, option: str, *, minimum: int = 0) -> int:
    """Coerce a CLI option (possibly a string) to an int >= minimum, or raise ConfigError naming it."""
    try:
        out = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"expected an integer >= {minimum}, got {value!r}", where=option) from None
    if isinstance(value, bool) or out < minimum or (isinstance(value, float) and value != out):
        raise ConfigError(f"expected an integer >= {minimum}, got {value!r}", where=option)
    return out
