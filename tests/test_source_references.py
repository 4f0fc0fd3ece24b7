"""Docstrings and comments that name a speceq object (``speceq.pipeline.fixed``, ``speceq.core.defaults.X``)
name one that exists: a renamed or removed function must not live on in the prose that points at it.

``speceq.<name>`` where ``speceq`` is the pytest fixture (``speceq.check()``, ``speceq.case(...)``) is
resolved against the fixture's class instead.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

from speceq.faces.pytest_support.checker import EquivalenceChecker

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("harness", "reports", "suites")
REFERENCE = re.compile(r"\bspeceq(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
#: what the fixture object has: its class's attributes and the instance attributes its methods set
FIXTURE_NAMES = set(dir(EquivalenceChecker)) | set(
    re.findall(r"self\.([A-Za-z_]\w*)\s*(?::[^=]+)?=", inspect.getsource(EquivalenceChecker)))


def _resolves(reference: str) -> bool:
    parts = reference.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            if not hasattr(obj, name):
                return parts[1] in FIXTURE_NAMES  # the fixture: speceq.check(), speceq.settings.seed
            obj = getattr(obj, name)
        return True
    return False


def _unresolved() -> dict[str, list[str]]:
    bad: dict[str, list[str]] = {}
    for folder in FOLDERS:
        for path in sorted((REPO / folder).rglob("*.py")):
            for m in REFERENCE.finditer(path.read_text(encoding="utf-8")):
                if not _resolves(m.group(0)):
                    bad.setdefault(m.group(0), []).append(str(path.relative_to(REPO)))
    return bad


def test_every_named_speceq_object_exists() -> None:
    bad = _unresolved()
    assert not bad, "the source names speceq objects that do not exist:\n" + "\n".join(
        f"{ref} (in {', '.join(sorted(set(paths)))})" for ref, paths in sorted(bad.items()))


def test_the_check_finds_a_stale_reference() -> None:
    assert not _resolves("speceq.pipeline.runner.collect")  # a function that was removed
    assert not _resolves("speceq.nosuch.module")
    assert _resolves("speceq.pipeline.fixed") and _resolves("speceq.core.defaults.DEFAULT_SAMPLES")
    assert _resolves("speceq.check")  # the fixture's method
