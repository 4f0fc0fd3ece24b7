"""HTML of a ``speceq audit`` matrix: a row per method, a column per setting and shape.

Input: the audit's ``AuditResult.to_dict()`` (``audit.json`` renders the same), so this module
needs neither torch, the engines nor the pipeline. Each cell shows its verdict (or ``not run`` /
``not supported`` with the reason), the TV estimate and its upper bound, the acceptance rate and
links to the cell's evidence: its ``result.json`` and its ``report.html``, relative to the audit
folder, where the page is written.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from speceq.errors import ConfigError
from speceq.reports.templating import environment, write_page
from speceq.verdicts.verdict import Verdict

#: The page's file name in the audit folder (its evidence links are relative to that folder).
AUDIT_HTML = "audit.html"
#: A cell's report file, beside its result.json.
CELL_REPORT = "report.html"


def _cell_view(cell: Mapping[str, Any]) -> dict[str, Any]:
    word = cell["verdict"] if cell.get("verdict") else cell["status"]
    result = cell.get("result")
    return {**cell, "word": word, "css": "v-" + word.replace(" ", "-"),
            "report": None if not result else str(Path(result).with_name(CELL_REPORT))}


def audit_view(audit: Mapping[str, Any]) -> dict[str, Any]:
    """What the template needs: header, columns and rows of cells (ConfigError on a malformed audit)."""
    for key in ("family", "baseline", "methods", "settings", "shapes", "cells", "samples", "seed"):
        if key not in audit:
            raise ConfigError(f"not a speceq audit: missing {key!r}", where="audit")
    cells = {(c["method"], c["setting"], c["shape"]): _cell_view(c) for c in audit["cells"]}
    columns = [(s, h) for s, _ in audit["settings"] for h, _ in audit["shapes"]]
    worlds = audit.get("method_worlds") or {}
    rows = [{"method": m, "world": worlds.get(m, audit.get("world")), "cells": [cells.get((m, s, h)) for s, h in columns]}
            for m in audit["methods"]]
    several = len({r["world"] for r in rows}) > 1
    verdict = audit.get("verdict")
    if verdict is not None:
        verdict = str(Verdict.parse(verdict))
    words = [c["word"] for c in cells.values()]
    counts = [(w, words.count(w)) for w in (*[str(v) for v in Verdict], "not run", "not supported") if words.count(w)]
    return {**audit, "verdict": verdict, "rows": rows, "counts": counts, "shape_labels": dict(audit["shapes"]),
            "setting_labels": dict(audit["settings"]), "n_shapes": len(audit["shapes"]),
            "several_worlds": several, "worlds": [str(w) for w in dict.fromkeys(r["world"] for r in rows) if w is not None]}


def render_audit_report(audit: Mapping[str, Any]) -> str:
    """A self-contained page of the matrix (same audit -> same string)."""
    return environment().get_template("audit.html.j2").render(a=audit_view(audit))


def write_audit_report(audit: Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    """Render ``audit`` and write the page to ``path`` atomically; return the path."""
    return write_page(render_audit_report(audit), path)


__all__ = ["AUDIT_HTML", "CELL_REPORT", "audit_view", "render_audit_report", "write_audit_report"]
