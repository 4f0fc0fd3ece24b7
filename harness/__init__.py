"""speceq: empirical distribution-equivalence tests for speculative decoding.

``import speceq`` is cheap: the public names below are imported on first use, so torch and
transformers load only when something that needs them is touched.

>>> import speceq
>>> config = speceq.RunConfig(samples=300)        # doctest: +SKIP
>>> result = speceq.run(config, speceq.default_cases())  # doctest: +SKIP
>>> print(result.summary())                       # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: public name -> module that defines it (imported lazily by :func:`__getattr__`).
_PUBLIC: dict[str, str] = {
    "run": "speceq.run",
    "RunConfig": "speceq.run",
    "Case": "speceq.cases",
    "SamplingParams": "speceq.params",
    "default_cases": "speceq.cases",
    "load_cases": "speceq.cases",
    "parse_cases": "speceq.cases",
    "RunResult": "speceq.verdicts.result",
    "CaseResult": "speceq.verdicts.result",
    "Engine": "speceq.engines.base",
    "SampleRequest": "speceq.engines.base",
    "SampleBatch": "speceq.engines.base",
    "resolve_engine": "speceq.engines.registry",
    "list_engines": "speceq.engines.registry",
    "load_samples_frame": "speceq.store",
    "write_report": "speceq.reports",
    "render_report": "speceq.reports",
    "SpeceqError": "speceq.errors",
    "ConfigError": "speceq.errors",
    "EngineError": "speceq.errors",
    "EngineNotFound": "speceq.errors",
    "StoreError": "speceq.errors",
    "DistributionMismatch": "speceq.errors",
}

__all__ = [
    "__version__", "run", "RunConfig", "Case", "SamplingParams", "default_cases", "load_cases",
    "parse_cases", "RunResult", "CaseResult", "Engine", "SampleRequest", "SampleBatch",
    "resolve_engine", "list_engines", "load_samples_frame", "write_report", "render_report",
    "SpeceqError", "ConfigError", "EngineError", "EngineNotFound", "StoreError", "DistributionMismatch",
]


def __getattr__(name: str) -> Any:
    """Import a public name on first access (PEP 562), keeping ``import speceq`` light."""
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'speceq' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))


if TYPE_CHECKING:  # for type checkers and IDEs; never executed
    from speceq.cases import Case, default_cases, load_cases, parse_cases
    from speceq.engines.base import Engine, SampleBatch, SampleRequest
    from speceq.engines.registry import list_engines, resolve_engine
    from speceq.errors import ConfigError, DistributionMismatch, EngineError, EngineNotFound, SpeceqError, StoreError
    from speceq.params import SamplingParams
    from speceq.reports import render_report, write_report
    from speceq.run import RunConfig, run
    from speceq.store import load_samples_frame
    from speceq.verdicts.result import CaseResult, RunResult
