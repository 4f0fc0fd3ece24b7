"""What code an engine runs, as part of every chunk's fingerprint.

A stored chunk is reused only when the code that would sample it now is the code that
sampled it: an edited engine never gets the old samples (and so never the old verdict).

- An engine defined in a file (``path/to/file.py:attr``, ``package.module:attr``, a class or
  function handed over as a Python object): the SHA-256 of that source file, plus the name
  and version of the installed distribution that ships it, when one does.
- speceq's own engines: the SHA-256 over speceq's engine sources (``speceq/engines``, the
  logits processing, the sampling parameters, the bundled model helpers) and speceq's version;
  an edit to analysis code does not invalidate stored samples.
- An engine whose code cannot be located (defined in an interactive session, a C
  extension): ``{"hashable": false, "reason": ...}``; the run says so, and stored samples
  of such an engine are reused on the word of its ``describe()`` only.

Only the file that defines the engine is hashed, not the modules it imports: an engine
spread over several files of the user's own is covered by its defining file only (say so
in the docs). No torch is imported here.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
from functools import lru_cache
from pathlib import Path
from typing import Any

#: speceq's sources that decide what its own engines sample (relative to the package folder).
SPECEQ_ENGINE_SOURCES: tuple[str, ...] = (
    "engines/**/*.py", "core/processing.py", "core/params.py", "models/*.py",
)


def _speceq_root() -> Path:
    from speceq.core.package import PACKAGE_DIR

    return PACKAGE_DIR


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _speceq_sources_sha256() -> str:
    """SHA-256 over (relative path, content) of every file of :data:`SPECEQ_ENGINE_SOURCES`."""
    root = _speceq_root()
    files = sorted({p for pattern in SPECEQ_ENGINE_SOURCES for p in root.glob(pattern) if p.is_file()})
    h = hashlib.sha256()
    for p in files:
        h.update(p.relative_to(root).as_posix().encode("utf-8") + b"\0")
        h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


@lru_cache(maxsize=1)
def _packages_distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def _distribution_of(module_name: str) -> dict[str, str] | None:
    """{"name", "version"} of the installed distribution providing ``module_name``'s top package."""
    top = module_name.partition(".")[0]
    for dist_name in _packages_distributions().get(top, []):
        try:
            return {"name": dist_name, "version": importlib.metadata.version(dist_name)}
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def code_target(engine: Any) -> Any:
    """The object whose source defines what ``engine`` samples: a wrapped function, else its class."""
    from speceq.engines.function import FunctionEngine

    if isinstance(engine, FunctionEngine):
        return engine.fn
    return type(engine)


def engine_code_identity(engine: Any) -> dict[str, Any]:
    """JSON-able identity of the code ``engine`` runs (see the module docstring)."""
    target = code_target(engine)
    module_name = getattr(target, "__module__", None) or ""
    try:
        source = inspect.getsourcefile(inspect.unwrap(target))
    except (TypeError, OSError) as e:
        return {"hashable": False, "reason": f"no source file for {_name(target)} ({e})"}
    if source is None or not Path(source).is_file():
        return {"hashable": False, "reason": f"{_name(target)} is not defined in a source file "
                                             "(interactive session or compiled code)"}
    path = Path(source).resolve()
    root = _speceq_root()
    if path.is_relative_to(root):
        from speceq.core.package import __version__

        return {"hashable": True, "scope": "speceq engine sources", "package": {"name": "speceq", "version": __version__},
                "sha256": _speceq_sources_sha256()}
    ident: dict[str, Any] = {"hashable": True, "scope": "defining file", "file": path.name,
                             "sha256": _file_sha256(path)}
    dist = _distribution_of(module_name) if module_name else None
    if dist is not None:
        ident["package"] = dist
    return ident


def code_summary(identity: dict[str, Any]) -> str:
    """One short line: ``speceq 0.1.0 sources sha256:1a2b3c4d`` / ``my_engine.py sha256:...`` / why not hashed."""
    if not identity.get("hashable"):
        return f"code not hashed: {identity.get('reason', 'unknown')}"
    pkg = identity.get("package")
    where = identity.get("file") or (f"{pkg['name']} {pkg['version']} sources" if pkg else "sources")
    version = f" ({pkg['name']} {pkg['version']})" if pkg and identity.get("file") else ""
    return f"{where}{version} sha256:{identity['sha256'][:12]}"


def _name(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__name__)}"
