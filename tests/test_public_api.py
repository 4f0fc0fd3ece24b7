"""The public names of ``speceq``: ``__all__`` is exactly what the package offers, and ``speceq.run`` is
always the function, whatever was imported before (the module that defines it is never called ``run``)."""

from __future__ import annotations

import doctest
import pkgutil
import subprocess
import sys
import types

import pytest

import speceq


def _submodules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(speceq.__path__, "speceq.") if ".suites." not in m.name)


def test_all_names_resolve_and_nothing_public_is_missing_from_all() -> None:
    for name in _submodules():
        __import__(name)
    exported = set(speceq.__all__)
    for name in exported:
        assert getattr(speceq, name) is not None, name
    public = {n for n in dir(speceq) if not n.startswith("_") and not isinstance(getattr(speceq, n), types.ModuleType)}
    assert public == exported - {"__version__"}, (public ^ (exported - {"__version__"}))


CHECK = """
import importlib, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
import speceq
assert callable(speceq.run) and isinstance(speceq.run, type(lambda: 0)), type(speceq.run)
assert speceq.run.__module__ == "speceq.pipeline.runner", speceq.run.__module__
print("ok")
"""


@pytest.mark.parametrize("order", ["runner-first", "config-first", "every-module", "every-module-reversed"])
def test_speceq_run_is_the_function_after_any_import_order(order: str) -> None:
    modules = {"runner-first": ["speceq.pipeline.runner"], "config-first": ["speceq.pipeline.config"],
               "every-module": _submodules(), "every-module-reversed": _submodules()[::-1]}[order]
    proc = subprocess.run([sys.executable, "-c", CHECK, *modules], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_the_package_docstring_runs() -> None:
    """The example at the top of ``speceq``'s docstring is a real run on two plain-function engines."""
    failures, tried = doctest.testmod(speceq, verbose=False, report=True)
    assert tried >= 8 and failures == 0
