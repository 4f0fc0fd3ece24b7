"""Fixtures of the plugin tests: a pytester project wired like the checkout.

``project`` is a pytester folder with: the repository's root ``conftest.py`` (so the plugin
registers as it does in the checkout), a ``pytest.ini`` with ``--strict-markers`` and
``filterwarnings = error``, and ``toy_engines.py`` (numpy samplers, no torch). PYTHONPATH
points at the repository so subprocess runs (xdist) import ``harness`` too.

``pytester`` itself is enabled in the root ``conftest.py``: pytest refuses ``pytest_plugins``
in a conftest below the root when a run starts at the repository root.
"""

from __future__ import annotations

import os

import pytest
from plugin_support import INI, REPO, TOY_ENGINES

import speceq.faces.pytest_support.checker  # noqa: F401

# Imported here, before any pytester run: an in-process run removes from sys.modules every
# module first imported during it, so scipy & co. would be imported again by every run.
import speceq.pipeline.analysis  # noqa: F401
import speceq.pipeline.runner  # noqa: F401
import speceq.reports.render  # noqa: F401


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    path = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), str(pytester.path), *([path] if path else [])]))
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    monkeypatch.setenv("SPECEQ_TORCH_THREADS", "1")
    pytester.makeini(INI)
    pytester.makeconftest((REPO / "conftest.py").read_text(encoding="utf-8"))
    pytester.makepyfile(toy_engines=TOY_ENGINES.read_text(encoding="utf-8"))
    pytester.syspathinsert()
    return pytester
