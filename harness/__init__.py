"""speceq: empirical distribution-equivalence tests for speculative decoding.

``import speceq`` is cheap: the public names below are imported on first use, so torch and
transformers load only when something that needs them is touched. ``speceq.run`` is always the
function that runs one check (the runner lives in :mod:`speceq.pipeline.runner`).

Two tiny engines written as plain functions, over a 4-token vocabulary: the candidate draws
the same law as the baseline, so the run comes out ``equivalent``.

>>> import tempfile
>>> import numpy as np
>>> import speceq
>>> def plain(prompt_ids, n, params, seed):
...     rng = np.random.default_rng(seed)
...     return rng.choice(4, size=(n, params.max_new_tokens), p=[0.5, 0.3, 0.15, 0.05]).tolist()
>>> engines = {role: speceq.resolve_engine(plain, options={"vocab_size": 4, "eos_token_id": None})
...            for role in ("baseline", "candidate")}
>>> case = speceq.Case(case_id="toy", prompt_ids=(1, 2), params=speceq.SamplingParams(max_new_tokens=2))
>>> with tempfile.TemporaryDirectory() as out:
...     config = speceq.RunConfig(samples=2000, oracle=False, tolerance=0.2, out_dir=out, progress=False)
...     result = speceq.run(config, [case], engines=engines)
>>> print(result.verdict, result.cases[0].verdict)
equivalent equivalent
"""

import importlib as _importlib
import typing as _typing

from speceq.core.package import __version__

#: public name -> module that defines it (imported lazily by :func:`__getattr__`).
_PUBLIC: dict[str, str] = {
    "run": "speceq.pipeline.runner",
    "RunConfig": "speceq.pipeline.config",
    "Case": "speceq.inputs.cases",
    "SamplingParams": "speceq.core.params",
    "default_cases": "speceq.inputs.cases",
    "load_cases": "speceq.inputs.cases",
    "parse_cases": "speceq.inputs.cases",
    "RunResult": "speceq.verdicts.result",
    "CaseResult": "speceq.verdicts.result",
    "Verdict": "speceq.verdicts.verdict",
    "Engine": "speceq.engines.base",
    "SampleRequest": "speceq.engines.base",
    "SampleBatch": "speceq.engines.base",
    "resolve_engine": "speceq.engines.registry",
    "list_engines": "speceq.engines.registry",
    "Oracle": "speceq.oracles.protocol",
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
    "__version__", "run", "RunConfig", "Case", "SamplingParams", "default_cases", "load_cases", "parse_cases",
    "RunResult", "CaseResult", "Verdict", "Engine", "SampleRequest", "SampleBatch", "resolve_engine", "list_engines", "Oracle",
    "load_samples_frame", "write_report", "render_report", "SpeceqError", "ConfigError", "EngineError",
    "EngineNotFound", "StoreError", "DistributionMismatch",
]


def __getattr__(name: str) -> _typing.Any:
    """Import a public name on first access (PEP 562), keeping ``import speceq`` light."""
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'speceq' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))


if _typing.TYPE_CHECKING:  # for type checkers and IDEs; never executed
    from speceq.core.params import SamplingParams
    from speceq.engines.base import Engine, SampleBatch, SampleRequest
    from speceq.engines.registry import list_engines, resolve_engine
    from speceq.errors import ConfigError, DistributionMismatch, EngineError, EngineNotFound, SpeceqError, StoreError
    from speceq.inputs.cases import Case, default_cases, load_cases, parse_cases
    from speceq.oracles.protocol import Oracle
    from speceq.pipeline.config import RunConfig
    from speceq.pipeline.runner import run
    from speceq.reports import render_report, write_report
    from speceq.store import load_samples_frame
    from speceq.verdicts.result import CaseResult, RunResult
