"""Sampling one chunk, in the driver or in a worker process (local or on a Ray node).

A worker never receives a live engine: it receives an :class:`EngineRecipe` (the engine's
spec string and options, resolved through :mod:`speceq.engines.registry`, or a pickled
engine object when the run was handed objects) and builds the engine once per process.
Only the driver validates and stores what a worker returns.

Transport, not storage: recipes, chunks and results travel between the driver and the
workers it started (private pipes, or Ray's object store) serialised with multiprocessing's
pickler, as every Python process pool does (an engine object inside its recipe with plain
:mod:`pickle`, see :func:`recipe_from_object`). Nothing pickled is ever written to or read from
a file: the store stays ``.npz`` (``allow_pickle=False``) and JSON. Errors come back as text
and are raised again as the same speceq error class.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from speceq import errors
from speceq.engines.base import Engine, SampleBatch
from speceq.engines.row_progress import listen_rows
from speceq.errors import ConfigError, EngineError, SpeceqError


@dataclass(frozen=True, slots=True)
class EngineRecipe:
    """How a worker rebuilds one engine: ``spec`` + ``options`` (registry), or ``pickled`` bytes."""

    spec: str | None = None
    options: tuple[tuple[str, Any], ...] = ()
    pickled: bytes | None = None

    @property
    def digest(self) -> str:
        h = hashlib.sha256(repr((self.spec, self.options)).encode("utf-8"))
        h.update(self.pickled or b"")
        return h.hexdigest()

    def build(self) -> Engine:
        if self.pickled is not None:
            return pickle.loads(self.pickled)
        from speceq.engines.registry import resolve_engine

        return resolve_engine(self.spec, options=dict(self.options))


def recipe_from_spec(spec: str, options: dict[str, Any]) -> EngineRecipe:
    return EngineRecipe(spec=spec, options=tuple(sorted(options.items())))


def recipe_from_object(engine: Engine) -> EngineRecipe | str:
    """A pickled-object recipe, or the reason the engine cannot be sent to a worker.

    Plain :mod:`pickle`, not multiprocessing's pickler: that one sends a torch tensor as a handle to
    this process's shared memory, which a worker started as a plain subprocess cannot open
    (``AuthenticationError``); plain pickle copies the tensors' data.
    """
    from speceq.pipeline.collect.code_identity import code_target

    if getattr(code_target(engine), "__module__", None) == "__main__":
        return "it is defined in the __main__ script, which a worker process does not import"
    try:
        data = pickle.dumps(engine, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(data)
    except Exception as e:  # pickling runs arbitrary __reduce__ code of third-party engines
        return f"{type(e).__name__}: {e}"
    return EngineRecipe(pickled=data)


#: First item of the message that gives a running worker new recipes (a kept pool serving its next run).
RECIPES_MESSAGE = "recipes"

_ENGINES: dict[str, Engine] = {}  # per worker process: recipe digest -> engine


def engine_for(recipe: EngineRecipe) -> Engine:
    """The engine of ``recipe``, built once per process."""
    key = recipe.digest
    if key not in _ENGINES:
        _ENGINES[key] = recipe.build()
    return _ENGINES[key]


#: The variable speceq's engines read their torch thread count from (``speceq.models.torch_utils.THREADS_ENV``,
#: spelled out here so that a worker does not import torch before its engine needs it).
THREADS_ENV = "SPECEQ_TORCH_THREADS"


def apply_worker_threads(threads: int) -> None:
    """torch threads of a worker process: set before any engine imports torch."""
    os.environ[THREADS_ENV] = str(threads)


def sample_chunk(chunk: Any, engine: Engine,
                 on_rows: Callable[[Any, int], None] | None = None) -> tuple[SampleBatch, float]:
    """Sample one planned chunk; errors name the case, engine and slice. Returns (batch, seconds).

    ``on_rows(chunk, done)``: called when the engine reports rows done inside the chunk
    (:func:`speceq.engines.row_progress.report_rows`).
    """
    request = chunk.request()
    name = getattr(engine, "name", chunk.role)
    where = f"case {chunk.case.case_id!r}, {chunk.role} engine {name!r}, slice {chunk.slice_index}"
    t0 = time.perf_counter()
    listener = None if on_rows is None else (lambda done: on_rows(chunk, done))
    try:
        with listen_rows(listener):
            batch = engine.sample(request)
    except EngineError as e:
        if e.case_id is None:
            raise EngineError(f"slice {chunk.slice_index}: {e}", engine=name, case_id=chunk.case.case_id) from e
        raise
    except ConfigError as e:
        raise ConfigError(str(e), where=where) from e
    except SpeceqError:
        raise
    except Exception as e:  # third-party engine code: report it with the chunk it failed on
        raise EngineError(f"sample() failed on slice {chunk.slice_index}: {type(e).__name__}: {e}",
                          engine=name, case_id=chunk.case.case_id) from e
    return batch, time.perf_counter() - t0


def item_case_id(item: Any) -> str | None:
    """The case a chunk or an oracle task belongs to (for error messages)."""
    case = getattr(item, "case", None)
    return getattr(case, "case_id", None) if case is not None else getattr(item, "case_id", None)


#: Error classes a worker's error is raised again as in the driver (others become EngineError).
_ERROR_CLASSES = {name: getattr(errors, name) for name in ("ConfigError", "EngineError", "EngineNotFound", "StoreError")}


def encode_error(e: BaseException) -> tuple[str, str]:
    return type(e).__name__, str(e)


def decode_error(payload: tuple[str, str], item: Any) -> BaseException:
    """The driver-side exception of a worker's error: same speceq class and message."""
    name, message = payload
    cls = _ERROR_CLASSES.get(name)
    if cls is not None:
        return cls(message)
    where = f"slice {item.slice_index}" if hasattr(item, "slice_index") else item.label()
    return EngineError(f"worker failed on {where}: {name}: {message}", case_id=item_case_id(item))
