"""Engines: the samplers under test, behind one small Protocol.

Importing this package is cheap (no torch): the project's own engines
(:mod:`~speceq.engines.baseline`, :mod:`~speceq.engines.reference`) and the adapters are
imported on first use through :func:`resolve_engine`.
"""

from speceq.engines.base import PAD_OUT, Engine, SampleBatch, SampleRequest, row_layout, validate_batch
from speceq.engines.function import FunctionEngine
from speceq.engines.registry import (
    BUILTIN_ENGINES,
    ENTRY_POINT_GROUP,
    list_engines,
    parse_engine_options,
    resolve_engine,
)

__all__ = [
    "BUILTIN_ENGINES",
    "ENTRY_POINT_GROUP",
    "PAD_OUT",
    "Engine",
    "FunctionEngine",
    "SampleBatch",
    "SampleRequest",
    "list_engines",
    "parse_engine_options",
    "resolve_engine",
    "row_layout",
    "validate_batch",
]
