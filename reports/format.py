"""Formatting of numbers and engine text for the HTML report.

Every string that comes from a saved result (engine output, token texts, prompts, configs)
passes through :func:`clean_text` before it is escaped: lone surrogates (which cannot be
encoded as UTF-8) become U+FFFD, and control characters become visible symbols, so that a
decoded byte soup shows up as what it is instead of breaking the page or the file write.
"""

from __future__ import annotations

import json
import math
from typing import Any

MISSING = "—"

_C0_VISIBLE = {i: chr(0x2400 + i) for i in range(0x20) if chr(i) not in "\n\t"}  # U+2400 control pictures
_C0_VISIBLE[0x7F] = "\u2421"  # DEL


def clean_text(text: str) -> str:
    """Return ``text`` safe to encode as UTF-8 and to show literally.

    Lone surrogates become U+FFFD; CR LF becomes LF; other C0 controls and DEL become their
    Unicode control pictures (e.g. NUL -> U+2400); C1 controls (U+0080-U+009F) become U+FFFD.
    """
    if text.isprintable() and "\r" not in text:
        return text
    text = text.replace("\r\n", "\n")
    out = []
    for ch in text:
        o = ord(ch)
        if 0xD800 <= o <= 0xDFFF or 0x80 <= o <= 0x9F:
            out.append("\ufffd")
        elif o in _C0_VISIBLE:
            out.append(_C0_VISIBLE[o])
        else:
            out.append(ch)
    return "".join(out)


def finalize(value: Any) -> Any:
    """Jinja ``finalize`` hook: every ``{{ expression }}`` passes here before escaping."""
    if value is None:
        return MISSING
    if hasattr(value, "__html__"):  # markup built by the report itself (SVG, macros): already clean
        return value
    if isinstance(value, str):
        return clean_text(value)
    return value


def fmt_p(p: float | None) -> str:
    """A p-value: 3 significant digits down to 1e-3, then scientific; 0 shown as underflow."""
    if p is None:
        return MISSING
    p = float(p)
    if math.isnan(p):
        return "nan"
    if p == 0.0:
        return "0 (underflow)"
    if p >= 1e-3:
        return f"{p:.3g}"
    return f"{p:.2e}"


def fmt_num(x: float | int | None, digits: int = 3) -> str:
    """A number for a table: integers with thousands separators, floats to ``digits`` significant digits."""
    if x is None:
        return MISSING
    if isinstance(x, bool):
        return str(x).lower()
    if isinstance(x, int):
        return f"{x:,}"
    x = float(x)
    if math.isnan(x) or math.isinf(x):
        return str(x)
    if x != 0 and (abs(x) >= 1e9 or abs(x) < 1e-3):
        return f"{x:.{digits - 1}e}"
    if abs(x) >= 10 ** digits:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def fmt_pct(x: float | None, digits: int = 1) -> str:
    """A fraction in [0, 1] as a percentage, e.g. ``0.713 -> '71.3 %'``."""
    if x is None:
        return MISSING
    x = float(x)
    if not math.isfinite(x):
        return str(x)
    return f"{100 * x:.{digits}f} %"


def fmt_value(value: Any) -> str:
    """A configuration value: strings as they are, anything else as compact sorted JSON."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, allow_nan=True, default=repr)
    except (TypeError, ValueError):  # e.g. non-string dict keys of mixed types
        return repr(value)


def visible_token(text: str) -> str:
    """Token text with newline and tab made visible (↵, ⇥), for one-line labels."""
    return clean_text(text).replace("\n", "\u21b5").replace("\t", "\u21e5")


def token_label(text: str, token: int, max_chars: int = 18) -> str:
    """A token for a chart label: its text in quotes (truncated with an ellipsis) and its id."""
    shown = visible_token(text)
    if len(shown) > max_chars:
        shown = shown[: max_chars - 1] + "…"
    return f"“{shown}” #{token}"


def finite_or_none(x: float | None) -> float | None:
    """``x`` as a float when it is a finite number, else None (NaN/inf/None are 'not available')."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None
