"""Root conftest of the speceq checkout.

- Registers the speceq pytest plugin when the package is not installed (no ``pytest11``
  entry point): exactly once, see :mod:`speceq.faces.pytest_support.wiring`.
- Enables ``pytester`` (used by tests/faces/plugin). It must be declared here: pytest refuses
  ``pytest_plugins`` in a conftest below the root when the run starts elsewhere.
"""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from speceq.faces.pytest_support.wiring import ensure_plugin

    ensure_plugin(pluginmanager)
