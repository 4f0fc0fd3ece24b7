"""HTML of kernel checks: a standalone page, and the section the run and session reports include.

Input: kernel-check results as ``KernelCheckResult.to_dict()`` dicts (saved JSON renders the
same), so this module needs neither torch nor the kernels package. Per kernel: verdict and
reason, the diagnosis, the scenarios (draws, time in the kernel and around it, what was not
tested), broken invariants, and the tests with the smallest p-values.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from markupsafe import Markup

from speceq.errors import ConfigError
from speceq.reports.templating import environment, write_page
from speceq.verdicts.verdict import Verdict

#: Tests shown per kernel (the smallest p-values; every rejecting one is among them when fewer).
MAX_TESTS_SHOWN = 40


def _view(result: Mapping[str, Any], where: str) -> dict[str, Any]:
    for key in ("kernel", "spec", "verdict", "reason", "tests", "violations", "findings", "scenarios", "alpha"):
        if key not in result:
            raise ConfigError(f"not a kernel-check result: missing {key!r}", where=where)
    try:
        Verdict.parse(result["verdict"])
    except ValueError as e:
        raise ConfigError(str(e), where=f"{where}.verdict") from None
    tests = list(result["tests"])
    rejected = [t for t in tests if t.get("rejected")]
    ranked = sorted(tests, key=lambda t: (not t.get("rejected"), t.get("pvalue", 1.0)))
    shown = max(MAX_TESTS_SHOWN, len(rejected))
    return {**result, "rejected": rejected, "top_tests": ranked[:shown], "shown": min(shown, len(tests)),
            "seconds": result.get("seconds", 0.0), "seed": result.get("seed", 0), "device": result.get("device", "cpu"),
            "label": result.get("label", "")}


def kernel_views(results: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """What the templates need per kernel result (validated: ConfigError names the bad entry)."""
    return [_view(r, f"kernel result {i}") for i, r in enumerate(results)]


def worst_kernel_verdict(results: Sequence[Mapping[str, Any]]) -> Verdict:
    return Verdict.worst(r["verdict"] for r in results)


def render_kernel_section(results: Sequence[Mapping[str, Any]]) -> Markup:
    """The ``Kernel checks`` section (HTML) of ``results``; empty markup when there are none."""
    if not results:
        return Markup("")
    return Markup(environment().get_template("_kernels.html.j2").render(kernels=kernel_views(results)))


def render_kernel_report(results: Sequence[Mapping[str, Any]]) -> str:
    """A self-contained page of kernel-check results (same results -> same string)."""
    if not results:
        raise ConfigError("no kernel-check result to render", where="kernel report")
    views = kernel_views(results)
    return environment().get_template("kernels.html.j2").render(kernels=views, verdict=worst_kernel_verdict(results))


def write_kernel_report(results: Sequence[Mapping[str, Any]], path: str | os.PathLike[str]) -> Path:
    """Render ``results`` and write the page to ``path`` atomically; return the path."""
    return write_page(render_kernel_report(results), path)
