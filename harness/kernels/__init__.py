"""Sampler-level checks: test a speculative-decoding verification kernel against its exact laws.

Wrap a kernel in a few lines (:func:`kernel` / :class:`KernelSpec`, layouts in
:mod:`speceq.kernels.contract`), then :func:`check` it: speceq builds the scenarios, draws the
drafts from the draft laws it hands in, owns the seeds and uniforms, tests every reached
position, the bonus and the accepted-length law exactly, and returns a verdict with a diagnosis.

Names are imported on first use, so the kernel-driving modules (contract, scenarios, collect)
load without scipy (a kernel can be driven in an environment that has only torch and numpy).
"""

from __future__ import annotations

import importlib
from typing import Any

_PUBLIC: dict[str, str] = {
    "check": "speceq.kernels.kernel_check",
    "KernelCheckResult": "speceq.kernels.kernel_check",
    "DEFAULT_ALPHA": "speceq.kernels.kernel_check",
    "Verdict": "speceq.verdicts.verdict",
    "check_drafter": "speceq.kernels.drafts",
    "DraftRequest": "speceq.kernels.drafts",
    "CHAIN_METHODS": "speceq.kernels.contract",
    "TREE_METHODS": "speceq.kernels.contract",
    "LAYOUTS": "speceq.kernels.contract",
    "Kernel": "speceq.kernels.contract",
    "KernelSpec": "speceq.kernels.contract",
    "Outcome": "speceq.kernels.contract",
    "RaggedRequest": "speceq.kernels.contract",
    "PaddedRequest": "speceq.kernels.contract",
    "SingleRequest": "speceq.kernels.contract",
    "TreeRequest": "speceq.kernels.contract",
    "ModelRequest": "speceq.kernels.contract",
    "MODEL_METHODS": "speceq.kernels.contract",
    "TableModel": "speceq.kernels.table_models",
    "sample_tokens": "speceq.kernels.table_models",
    "as_kernel": "speceq.kernels.contract",
    "kernel": "speceq.kernels.contract",
    "RequestParams": "speceq.kernels.target_processing",
    "Scenario": "speceq.kernels.scenarios",
    "Template": "speceq.kernels.scenarios",
    "TemplateSpec": "speceq.kernels.scenarios",
    "default_scenarios": "speceq.kernels.scenarios",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'speceq.kernels' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
