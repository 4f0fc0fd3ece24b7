"""Register the plugin exactly once, for checkouts where the ``pytest11`` entry point is absent.

The package declares the entry point ``speceq = "speceq.faces.plugin"``; once installed
(``pip install -e .``) pytest loads it by itself and a second registration would fail
("Plugin already registered under a different name"). The root ``conftest.py`` and
``suites/conftest.py`` call :func:`ensure_plugin` from ``pytest_addhooks``, which pytest
calls when the conftest is registered, before the command line is parsed.

With the package installed, ``-p speceq.faces.plugin`` on top of the entry point makes pytest
register one module under two names and stop; name the entry point instead (``-p speceq``,
needed only under ``PYTEST_DISABLE_PLUGIN_AUTOLOAD``).
"""

from __future__ import annotations

import sys

import pytest

PLUGIN_MODULE = "speceq.faces.plugin"
ENTRY_POINT_NAME = "speceq"


def ensure_plugin(pluginmanager: pytest.PytestPluginManager) -> bool:
    """Register :mod:`speceq.faces.plugin` unless it is registered or blocked; True when this call did it.

    Registered already: by the entry point (name ``speceq``), by ``-p speceq.faces.plugin``, or by
    another conftest. Blocked: ``-p no:speceq`` or ``-p no:speceq.faces.plugin`` (respected).
    """
    if pluginmanager.is_blocked(ENTRY_POINT_NAME) or pluginmanager.is_blocked(PLUGIN_MODULE):
        return False
    if pluginmanager.has_plugin(ENTRY_POINT_NAME) or pluginmanager.has_plugin(PLUGIN_MODULE):
        return False
    module = sys.modules.get(PLUGIN_MODULE)
    if module is not None and pluginmanager.is_registered(module):
        return False
    pluginmanager.import_plugin(PLUGIN_MODULE)
    return True
