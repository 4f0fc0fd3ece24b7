"""Sampler-level checks: test a speculative-decoding verification kernel against its exact laws.

Wrap a kernel in a few lines (:func:`kernel` / :class:`KernelSpec`, layouts in
:mod:`speceq.kernels.contract`), then :func:`check` it: speceq builds the scenarios, draws the
drafts from the draft laws it hands in, owns the seeds and uniforms, tests every reached
position, the bonus and the accepted-length law exactly, and returns a verdict with a diagnosis.
"""

from speceq.kernels.check import DEFAULT_ALPHA, EXIT_CODES, KernelCheckResult, check
from speceq.kernels.contract import (
    CHAIN_METHODS,
    LAYOUTS,
    TREE_METHODS,
    Kernel,
    KernelSpec,
    Outcome,
    PaddedRequest,
    RaggedRequest,
    SingleRequest,
    TreeRequest,
    as_kernel,
    kernel,
)
from speceq.kernels.processing import RequestParams
from speceq.kernels.scenarios import Scenario, Template, TemplateSpec, default_scenarios

__all__ = [
    "DEFAULT_ALPHA", "EXIT_CODES", "KernelCheckResult", "check",
    "CHAIN_METHODS", "LAYOUTS", "TREE_METHODS", "Kernel", "KernelSpec", "Outcome", "PaddedRequest", "RaggedRequest",
    "SingleRequest", "TreeRequest", "as_kernel", "kernel",
    "RequestParams", "Scenario", "Template", "TemplateSpec", "default_scenarios",
]
