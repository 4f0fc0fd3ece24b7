"""Loading a user's object from ``package.module:attr`` or ``path/to/file.py:attr`` (engines, kernels).

A file is imported under a name derived from its resolved path, once per process, so that two
files with the same stem never collide and a second lookup returns the same module. Every
failure is an :class:`~speceq.errors.EngineNotFound` naming what was looked up (``kind`` and
``label``: e.g. engine 'candidate', kernel 'my_kernel.py:check') and what went wrong.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from speceq.errors import EngineNotFound


def is_file_target(where: str) -> bool:
    """Whether the part before ``:attr`` names a file (``x.py``, or a path) rather than a module."""
    return where.endswith(".py") or "/" in where or "\\" in where


def import_user_file(path: Path, *, kind: str, label: str) -> Any:
    """Import the Python file ``path`` (once per process) and return the module."""
    path = path.expanduser().resolve()
    if not path.is_file():
        raise EngineNotFound(f"{kind} {label!r}: file {str(path)!r} does not exist")
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    name = f"speceq_user_{kind}_{path.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise EngineNotFound(f"{kind} {label!r}: cannot import {str(path)!r} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # any error raised while the user's file runs
        del sys.modules[name]
        raise EngineNotFound(f"{kind} {label!r}: importing {str(path)!r} failed: {type(exc).__name__}: {exc}") from exc
    return module


def load_attribute(target: str, *, kind: str, label: str) -> Any:
    """Import ``module:attr`` or ``file.py:attr`` (``attr`` may be dotted) and return the attribute."""
    where, sep, attr = target.rpartition(":")
    if not sep or not where or not attr:
        raise EngineNotFound(f"{kind} {label!r}: expected 'module:attr' or 'path/to/file.py:attr'")
    if is_file_target(where):
        module = import_user_file(Path(where), kind=kind, label=label)
    else:
        try:
            module = importlib.import_module(where)
        except Exception as exc:  # ImportError, or any error raised while the module runs
            raise EngineNotFound(f"{kind} {label!r}: cannot import module {where!r}: "
                                 f"{type(exc).__name__}: {exc}") from exc
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            public = sorted(n for n in dir(module) if not n.startswith("_"))
            close = difflib.get_close_matches(part, public, n=3)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            raise EngineNotFound(f"{kind} {label!r}: {where!r} has no attribute {attr!r}.{hint}") from None
    return obj
