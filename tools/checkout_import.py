"""``import speceq`` from a checkout where the package is not installed.

The library lives in the checkout's ``harness/`` folder and is installed as ``speceq``. Scripts that
run where nothing is installed (an accelerator machine without registry access, the vLLM
virtual environment) map ``speceq`` onto that folder with :func:`import_speceq_from_checkout`.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def import_speceq_from_checkout(*, prefer_installed: bool = True) -> None:
    """Register this checkout's ``harness/`` as the ``speceq`` package in ``sys.modules``.

    prefer_installed: when ``speceq`` is already importable (installed), use it as it is and
    map nothing; False maps the checkout even then (a script that must run this tree's code).
    """
    if prefer_installed and importlib.util.find_spec("speceq") is not None:
        return
    init = REPO / "harness" / "__init__.py"
    spec = importlib.util.spec_from_file_location("speceq", init, submodule_search_locations=[str(init.parent)])
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load speceq from {init}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["speceq"] = module
    spec.loader.exec_module(module)
