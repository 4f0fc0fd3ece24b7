"""Conftest of the suites: registers the speceq plugin when it is not installed as an entry point.

When the package is installed, pytest loads the plugin through its ``pytest11`` entry point
and :func:`~speceq.faces.pytest_support.wiring.ensure_plugin` does nothing.
"""

from __future__ import annotations

import pytest


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from speceq.faces.pytest_support.wiring import ensure_plugin

    ensure_plugin(pluginmanager)
