"""Collection machinery behind :func:`speceq.run.collect`: executors, engine recipes, progress,
and the code identity that goes into every chunk's fingerprint.

Which executor samples (see :mod:`speceq.collect.executors`):

- ``executor="local"``, ``workers=1``: serial, in the driver.
- ``executor="local"``, ``workers=N > 1``: N local worker processes.
- ``executor="local"``, ``workers=None`` (auto): :func:`auto_workers`, the idle CPUs (at most one
  process per chunk to sample; 1: serial).
- ``executor="ray"``: Ray tasks (local instance, or the cluster at ``ray_address``).

Workers rebuild engines from their spec strings (or from a pickled engine object when the
run was given objects); an engine that cannot be sent to a worker makes the run sample
serially, and it says so.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from speceq.collect.executors import Executor, ProcessExecutor, SerialExecutor
from speceq.collect.sampling import THREADS_ENV, EngineRecipe, recipe_from_object, recipe_from_spec
from speceq.engines.base import Engine

EXECUTORS: tuple[str, ...] = ("local", "ray")

__all__ = ["EXECUTORS", "Executor", "ProcessExecutor", "SerialExecutor", "auto_workers", "choose_executor",
           "engine_recipes", "usable_cpus", "worker_threads"]


def usable_cpus() -> int:
    """CPUs this process may run on (affinity mask where the platform has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def auto_workers(pending: int, *, load: float | None = None) -> int:
    """Default worker count: the CPUs that are idle now, at least 1, at most one per chunk to sample.

    Idle CPUs = usable CPUs minus the 1-minute load average (``load``; read from the system
    when None, 0 where the platform has none). On an idle 2-core machine this is 2 worker
    processes (each with 1 torch thread: more threads per process were measured slower).
    On the shared, busy 2-core development machine (load 14-17) 2 workers sampled the default
    run's chunks no faster than 1 (each chunk took 1.77x longer, docs/SCALE.md), so a busy
    machine gets 1 worker, which also spares the worker start-up.
    """
    cpus = usable_cpus()
    if load is None:
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):  # Windows; no load figure
            load = 0.0
    idle = int(cpus - load + 0.5)
    return max(1, min(cpus, idle, pending))


def worker_threads(threads: int | None) -> int:
    """torch threads per worker: ``threads``, else ``$SPECEQ_TORCH_THREADS``, else 1."""
    if threads is not None:
        return threads
    env = os.environ.get(THREADS_ENV, "")
    return int(env) if env.isdigit() and int(env) > 0 else 1


def _absolute_spec(spec: str) -> str:
    """``rel/path.py:attr`` -> ``/abs/rel/path.py:attr`` (workers may run elsewhere); others unchanged."""
    where, sep, attr = spec.rpartition(":")
    if sep and (where.endswith(".py") or "/" in where or "\\" in where):
        return f"{Path(where).expanduser().resolve()}:{attr}"
    return spec


def engine_recipes(engines: Mapping[str, Engine], specs: Mapping[str, tuple[str, Mapping[str, Any]]] | None
                   ) -> dict[str, EngineRecipe] | str:
    """Per role, how a worker rebuilds the engine, or the reason one cannot.

    ``specs`` (role -> (spec, options)): the engines were resolved from these, so workers
    resolve them again (nothing heavy is pickled). None: the engines were handed over as
    objects; they are pickled, and an object that cannot be pickled is the reason returned.
    """
    if specs is not None:
        return {role: recipe_from_spec(_absolute_spec(spec), dict(options)) for role, (spec, options) in specs.items()}
    recipes: dict[str, EngineRecipe] = {}
    for role, engine in engines.items():
        got = recipe_from_object(engine)
        if isinstance(got, str):
            return (f"the {role} engine {getattr(engine, 'name', role)!r} was given as a Python object that cannot "
                    f"be sent to a worker process ({got})")
        recipes[role] = got
    return recipes


def choose_executor(*, executor: str, workers: int | None, ray_address: str | None, threads: int | None,
                    engines: Mapping[str, Engine], specs: Mapping[str, tuple[str, Mapping[str, Any]]] | None,
                    pending: int, notify: Callable[[str], None] | None = None) -> Executor:
    """The executor for ``pending`` chunks (see the module docstring)."""
    say = notify or (lambda s: print(f"speceq: {s}", file=sys.stderr))
    n = auto_workers(pending) if workers is None else workers
    if pending == 0 or (executor == "local" and min(n, pending) <= 1):
        return SerialExecutor(engines)
    recipes = engine_recipes(engines, specs)
    if isinstance(recipes, str):
        say(f"sampling serially: {recipes}; pass the engine as a spec string ('module:attr' or "
            "'file.py:attr') to use worker processes")
        return SerialExecutor(engines)
    if executor == "ray":
        from speceq.collect.ray_executor import RayExecutor

        return RayExecutor(recipes, address=ray_address, workers=workers, threads=worker_threads(threads))
    return ProcessExecutor(recipes, min(n, pending), worker_threads(threads), notify=say)
