"""Turn a kernel name into a :class:`~speceq.kernels.contract.Kernel` (for the CLI and the pytest fixture).

Forms:

- ``package.module:attr`` or ``path/to/file.py:attr``: the attribute is a Kernel, a function
  decorated with :func:`~speceq.kernels.contract.kernel` (or carrying ``speceq_kernel_spec``), or
  a zero-argument factory returning one of those;
- ``reference[:LAYOUT[:METHOD]]``: speceq's reference kernel (layout ragged, padded, single or
  tree; method as in :data:`~speceq.kernels.contract.CHAIN_METHODS` / ``TREE_METHODS``);
- ``mutant:NAME``: a kernel of the gallery (:mod:`speceq.kernels.mutants`), lossless variants included;
- ``transformers``: transformers' ``_speculative_sampling``.

A spec given with the name (layout, method, ...) overrides the kernel's own.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Any

from speceq.errors import ConfigError, EngineNotFound
from speceq.kernels.contract import Kernel, KernelSpec, as_kernel

BUILTINS = ("reference", "mutant:<name>", "transformers")


def _import_file(path: Path, name: str) -> Any:
    path = path.expanduser().resolve()
    if not path.is_file():
        raise EngineNotFound(f"kernel {name!r}: file {str(path)!r} does not exist")
    module_name = f"speceq_user_kernel_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:10]}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise EngineNotFound(f"kernel {name!r}: cannot import {str(path)!r} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # any error raised while the user's file runs
        del sys.modules[module_name]
        raise EngineNotFound(f"kernel {name!r}: importing {str(path)!r} failed: {type(exc).__name__}: {exc}") from exc
    return module


def _attribute(target: str) -> Any:
    where, _, attr = target.rpartition(":")
    if where.endswith(".py") or "/" in where or "\\" in where:
        module = _import_file(Path(where), target)
    else:
        try:
            module = importlib.import_module(where)
        except Exception as exc:  # ImportError, or any error raised while the module runs
            raise EngineNotFound(f"kernel {target!r}: cannot import module {where!r}: "
                                 f"{type(exc).__name__}: {exc}") from exc
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            public = sorted(n for n in dir(module) if not n.startswith("_"))
            close = difflib.get_close_matches(part, public, n=3)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            raise EngineNotFound(f"kernel {target!r}: {where!r} has no attribute {attr!r}.{hint}") from None
    return obj


def _builtin(name: str) -> Kernel | None:
    head, _, rest = name.partition(":")
    if head == "reference":
        parts = [p for p in rest.split(":") if p] if rest else []
        layout = parts[0] if parts else "ragged"
        if layout == "tree":
            from speceq.kernels.trees import reference_tree_kernel

            return reference_tree_kernel(parts[1] if len(parts) > 1 else "target-only")
        from speceq.kernels.reference import reference_kernel

        try:
            return reference_kernel(layout, parts[1] if len(parts) > 1 else "standard")
        except (KeyError, ValueError) as exc:
            raise ConfigError(f"{exc}", where=f"kernel {name!r}") from None
    if head == "mutant":
        from speceq.kernels.mutants import LOSSLESS, MUTANTS, make

        try:
            return make(rest)
        except KeyError:
            close = difflib.get_close_matches(rest, [*MUTANTS, *LOSSLESS], n=3, cutoff=0.4)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            raise EngineNotFound(f"unknown kernel mutant {rest!r}.{hint} Known: {', '.join([*MUTANTS, *LOSSLESS])}") \
                from None
    if name == "transformers":
        from speceq.kernels.hf_adapter import transformers_speculative_sampling

        return transformers_speculative_sampling()
    return None


def resolve_kernel(name: str, spec: KernelSpec | None = None) -> Kernel:
    """The kernel ``name`` refers to (module docstring), with ``spec`` overriding its own when given."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"expected a kernel name, got {name!r}", where="kernel")
    name = name.strip()
    found = _builtin(name)
    if found is not None:
        return found if spec is None else Kernel(found.fn, spec)
    if ":" not in name:
        raise EngineNotFound(f"unknown kernel {name!r}: give 'package.module:attr', 'path/to/file.py:attr' or one of "
                             f"{', '.join(BUILTINS)}")
    obj = _attribute(name)
    if not isinstance(obj, Kernel) and getattr(obj, "speceq_kernel_spec", None) is None and callable(obj):
        try:
            params = inspect.signature(obj).parameters
        except (TypeError, ValueError):
            params = None
        required = [p for p in (params or {}).values()
                    if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if params is not None and not required:  # a zero-argument factory
            obj = obj()
    return as_kernel(obj, spec)


def resolve_drafter(name: str) -> Any:
    """A drafter function: ``drafter:NAME`` (the gallery's, :data:`speceq.kernels.drafts.DRAFTERS`) or MODULE:ATTR."""
    if name.startswith("drafter:"):
        from speceq.kernels.drafts import DRAFTERS

        key = name.split(":", 1)[1]
        if key not in DRAFTERS:
            raise EngineNotFound(f"unknown drafter {key!r}; known: {', '.join(DRAFTERS)}")
        return DRAFTERS[key][0]
    if ":" not in name:
        raise EngineNotFound(f"unknown drafter {name!r}: give 'drafter:NAME', 'package.module:attr' or "
                             "'path/to/file.py:attr'")
    obj = _attribute(name)
    if not callable(obj):
        raise ConfigError(f"a drafter must be callable, got {type(obj).__name__}", where=f"drafter {name!r}")
    return obj
