"""The Jinja2 environment every speceq page is rendered with (run report, kernel report).

Autoescaping is on and undefined names fail, so a template can neither inject markup nor
silently print an empty value; the filters are the number formats of :mod:`speceq.reports.format`.
"""

from __future__ import annotations

import os
from pathlib import Path

import jinja2

from speceq.reports.format import finalize, fmt_num, fmt_p, fmt_pct, fmt_value
from speceq.store.atomic import atomic_write


def _build() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("speceq.reports", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        finalize=finalize,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(p=fmt_p, num=fmt_num, pct=fmt_pct, value=fmt_value)
    return env


_ENV = _build()


def environment() -> jinja2.Environment:
    """The shared template environment (built once per process)."""
    return _ENV


def write_page(html: str, path: str | os.PathLike[str]) -> Path:
    """Write an HTML page to ``path`` atomically (a reader sees the old page or the complete new one, never a
    part); parent folders are created. Returns the path."""
    target, data = Path(path), html.encode("utf-8")
    atomic_write(target, lambda f: f.write(data))
    return target
