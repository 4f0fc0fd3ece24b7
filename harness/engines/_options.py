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


#: Option names users reach for, and what the built-in engines call them.
OPTION_ALIASES: dict[str, str] = {
    "model": "target",
    "model_path": "target",
    "model_dir": "target",
    "target_model": "target",
    "draft_model": "draft",
    "assistant_model": "draft",
    "assistant": "draft",
}


def unknown_options_message(unknown: list[str], allowed: list[str]) -> str:
    """One line for options an engine does not take: which ones, what each may have meant
    (``model`` -> ``target``; close spellings), and every option the engine takes."""
    import difflib

    hints = []
    for name in unknown:
        alias = OPTION_ALIASES.get(name)
        if alias is not None and alias in allowed:
            hints.append(f"the {alias} model is given as {alias}=... (not {name}=...)")
            continue
        close = difflib.get_close_matches(name, allowed, n=2, cutoff=0.6)
        if close:
            hints.append(f"{name!r}: did you mean {' or '.join(repr(c) for c in close)}?")
    shown = ", ".join(repr(n) for n in unknown)
    hint = f" ({'; '.join(hints)})" if hints else ""
    return f"unknown option(s) {shown}{hint}. Options it takes: {', '.join(allowed) or 'none'}"
