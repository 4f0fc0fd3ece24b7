"""Turn a kernel name into a :class:`~speceq.kernels.contract.Kernel` (for the CLI and the pytest fixture).

Forms:

- ``package.module:attr`` or ``path/to/file.py:attr``: the attribute is a Kernel, a function
  decorated with :func:`~speceq.kernels.contract.kernel` (or carrying ``speceq_kernel_spec``), or
  a zero-argument factory returning one of those;
- ``reference[:LAYOUT[:METHOD]]``: speceq's reference kernel (layout ragged, padded, single or
  tree; method as in :data:`~speceq.kernels.contract.CHAIN_METHODS` / ``TREE_METHODS``);
- ``mutant:NAME``: a kernel of the gallery (:mod:`speceq.kernels.kernel_mutants`), lossless variants included;
- ``transformers``: transformers' ``_speculative_sampling``;
- ``reference:model`` and ``model:NAME``: kernels written against the model layout's exact
  models (:data:`MODEL_KERNELS`).

A spec given with the name (layout, method, ...) overrides the kernel's own.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from typing import Any

from speceq.core.user_code import load_attribute
from speceq.errors import ConfigError, EngineNotFound
from speceq.kernels.contract import Kernel, KernelSpec, as_kernel

BUILTINS = ("reference", "mutant:<name>", "transformers", "model:<name>")
#: Built-in model-layout kernels: name -> (module, factory, its arguments).
MODEL_KERNELS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "chain": ("speceq.kernels.model_layout", "reference_model_kernel", ()),
    "residual-from-target": ("speceq.kernels.model_layout", "residual_from_target_kernel", ()),
    "block-resampling": ("speceq.kernels.block_resampling", "block_resampling_kernel", ("exact",)),
    "block-resampling-truncated": ("speceq.kernels.block_resampling", "block_resampling_kernel", ("truncated",)),
    "block-resampling-capped": ("speceq.kernels.block_resampling", "block_resampling_kernel", ("capped",)),
}


def _attribute(target: str) -> Any:
    return load_attribute(target, kind="kernel", label=target)


def _builtin(name: str) -> Kernel | None:
    head, _, rest = name.partition(":")
    if head == "reference":
        parts = [p for p in rest.split(":") if p] if rest else []
        layout = parts[0] if parts else "ragged"
        if layout == "model":
            from speceq.kernels.model_layout import reference_model_kernel

            return reference_model_kernel()
        if layout == "tree":
            from speceq.kernels.trees import reference_tree_kernel

            return reference_tree_kernel(parts[1] if len(parts) > 1 else "target-only")
        from speceq.kernels.reference_kernels import reference_kernel

        try:
            return reference_kernel(layout, parts[1] if len(parts) > 1 else "standard")
        except (KeyError, ValueError) as exc:
            raise ConfigError(f"{exc}", where=f"kernel {name!r}") from None
    if head == "mutant":
        from speceq.kernels.kernel_mutants import LOSSLESS, MUTANTS, make

        try:
            return make(rest)
        except KeyError:
            close = difflib.get_close_matches(rest, [*MUTANTS, *LOSSLESS], n=3, cutoff=0.4)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            raise EngineNotFound(f"unknown kernel mutant {rest!r}.{hint} Known: {', '.join([*MUTANTS, *LOSSLESS])}") \
                from None
    if head == "model":
        if rest not in MODEL_KERNELS:
            raise EngineNotFound(f"unknown model-layout kernel {rest!r}; known: {', '.join(MODEL_KERNELS)}")
        module, factory, args = MODEL_KERNELS[rest]
        return getattr(importlib.import_module(module), factory)(*args)
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
