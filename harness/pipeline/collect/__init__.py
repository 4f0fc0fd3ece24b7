"""Collection machinery of both run loops: the :class:`~speceq.pipeline.collect.collector.ChunkCollector`
they share, executors, engine recipes, progress, and the code identity that goes into every chunk's
fingerprint.

Which executor samples (see :mod:`speceq.pipeline.collect.executors`):

- ``executor="local"``, ``workers=1``: serial, in the driver.
- ``executor="local"``, ``workers=N > 1``: N local worker processes.
- ``executor="local"``, ``workers=None`` (auto): :func:`auto_workers`, the CPUs idle right now (at most
  one process per chunk to sample; 1: serial).
- ``executor="ray"``: Ray tasks (local instance, or the cluster at ``ray_address``).

Workers rebuild engines from their spec strings (or from a pickled engine object when the
run was given objects); an engine that cannot be sent to a worker makes the run sample
serially, and it says so.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from speceq.core.user_code import is_file_target
from speceq.engines.base import Engine
from speceq.pipeline.collect.executors import Executor, ProcessExecutor, SerialExecutor
from speceq.pipeline.collect.sampling import THREADS_ENV, EngineRecipe, recipe_from_object, recipe_from_spec

EXECUTORS: tuple[str, ...] = ("local", "ray")

__all__ = ["EXECUTORS", "Executor", "ProcessExecutor", "SerialExecutor", "auto_workers", "busy_cpus_now",
           "choose_executor", "engine_recipes", "usable_cpus", "worker_threads"]


def usable_cpus() -> int:
    """CPUs this process may run on (affinity mask where the platform has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


#: A CPU counts as idle for ``--workers auto`` when other processes leave at least this fraction of it.
IDLE_FRACTION = 0.25
#: Seconds over which ``--workers auto`` measures how busy the CPUs are right now.
BUSY_WINDOW_S = 0.25


def _usable_cpu_ids() -> set[int] | None:
    try:
        return set(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return None


def _cpu_jiffies(cpus: set[int] | None) -> tuple[int, int, int] | None:
    """(busy ticks, total ticks, CPUs counted) since boot from ``/proc/stat``, over ``cpus`` (None: all)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            lines = [line.split() for line in f if line.startswith("cpu") and line[3:4].isdigit()]
    except OSError:
        return None
    busy = total = counted = 0
    for fields in lines:
        if cpus is not None and int(fields[0][3:]) not in cpus:
            continue
        ticks = [int(x) for x in fields[1:9]]
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
        busy, total, counted = busy + sum(ticks) - idle, total + sum(ticks), counted + 1
    return (busy, total, counted) if counted else None


def busy_cpus_now(window_s: float = BUSY_WINDOW_S) -> float | None:
    """CPUs that OTHER processes keep busy right now: measured over ``window_s`` seconds, this process excluded.

    Reads the busy and total time of the CPUs this process may run on before and after a short
    sleep (this process's own CPU time in the window is taken off), so it says what the machine
    is doing now, not what the 1-minute load average remembers (right after ``pip install``, or
    a previous run, that average still reads ~1 on an idle 2-core machine). None where the
    platform has no ``/proc/stat`` (then :func:`auto_workers` takes every usable CPU).
    """
    cpus = _usable_cpu_ids()
    before, own_before = _cpu_jiffies(cpus), os.times()
    if before is None:
        return None
    time.sleep(window_s)
    after, own_after = _cpu_jiffies(cpus), os.times()
    if after is None or after[1] <= before[1]:
        return None
    own = ((own_after.user + own_after.system) - (own_before.user + own_before.system)) * os.sysconf("SC_CLK_TCK")
    busy = max(0.0, (after[0] - before[0]) - own)
    return min(float(after[2]), busy / (after[1] - before[1]) * after[2])


def auto_workers(pending: int, *, busy: float | None = None) -> int:
    """Default worker count: the CPUs other processes leave idle now, at least 1, at most one per chunk to sample.

    One worker per usable CPU that other processes leave at least :data:`IDLE_FRACTION` idle;
    ``busy``: CPUs other processes keep busy (:func:`busy_cpus_now` when None; every CPU is
    taken when the platform cannot say). On an idle 2-core machine this is 2 worker processes
    (each with 1 torch thread: more threads per process were measured slower), also right
    after an install; on the shared, busy 2-core development machine (both cores taken by
    other jobs) 2 workers sampled the default run's chunks no faster than 1 (each chunk took
    1.77x longer, docs/how-to/scale.md), so a machine whose cores other jobs use gets 1 worker, which
    also spares the worker start-up.
    """
    cpus = usable_cpus()
    if busy is None:
        busy = busy_cpus_now() or 0.0
    idle = math.ceil(cpus - busy - IDLE_FRACTION)  # CPUs at least IDLE_FRACTION idle
    return max(1, min(cpus, idle, pending))


def auto_workers_reason(pending: int) -> tuple[int, str]:
    """``--workers auto``'s count and why, for the run's log line."""
    busy = busy_cpus_now()
    n = auto_workers(pending, busy=busy or 0.0)
    now = "not measurable here" if busy is None else f"{busy:.2f} busy with other processes now"
    return n, f"--workers auto: {n} ({usable_cpus()} usable CPUs, {now}, {pending} items to run)"


def worker_threads(threads: int | None) -> int:
    """torch threads per worker: ``threads``, else ``$SPECEQ_TORCH_THREADS``, else 1."""
    if threads is not None:
        return threads
    env = os.environ.get(THREADS_ENV, "")
    return int(env) if env.isdigit() and int(env) > 0 else 1


def _absolute_spec(spec: str) -> str:
    """``rel/path.py:attr`` -> ``/abs/rel/path.py:attr`` (workers may run elsewhere); others unchanged."""
    where, sep, attr = spec.rpartition(":")
    if sep and is_file_target(where):
        return f"{Path(where).expanduser().resolve()}:{attr}"
    return spec


def engine_recipes(engines: Mapping[str, Engine], specs: Mapping[str, tuple[str, Mapping[str, Any]]] | None
                   ) -> dict[str, EngineRecipe] | str:
    """Per role, how a worker rebuilds the engine, or the reason one cannot.

    ``specs`` (role -> (spec, options)): the engines of these roles were resolved from them, so
    workers resolve them again (nothing heavy is pickled). The other roles' engines (all of
    them when ``specs`` is None) were handed over as objects; they are pickled, and an object
    that cannot be pickled is the reason returned.
    """
    recipes: dict[str, EngineRecipe] = {role: recipe_from_spec(_absolute_spec(spec), dict(options))
                                        for role, (spec, options) in (specs or {}).items()}
    for role, engine in engines.items():
        if role in recipes:
            continue
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
    n, why = auto_workers_reason(pending) if workers is None else (workers, "")
    chosen = _choose(executor=executor, n=n, workers=workers, ray_address=ray_address, threads=threads,
                     engines=engines, specs=specs, pending=pending, say=say)
    if workers is None and executor == "local" and pending > 0:
        chosen.description += f"; {why}"
    return chosen


def _choose(*, executor: str, n: int, workers: int | None, ray_address: str | None, threads: int | None,
            engines: Mapping[str, Engine], specs: Mapping[str, tuple[str, Mapping[str, Any]]] | None,
            pending: int, say: Callable[[str], None]) -> Executor:
    if pending == 0 or (executor == "local" and min(n, pending) <= 1):
        return SerialExecutor(engines)
    recipes = engine_recipes(engines, specs)
    if isinstance(recipes, str):
        say(f"sampling serially: {recipes}; pass the engine as a spec string ('module:attr' or "
            "'file.py:attr') to use worker processes")
        return SerialExecutor(engines)
    if executor == "ray":
        from speceq.pipeline.collect.ray_executor import RayExecutor

        return RayExecutor(recipes, address=ray_address, workers=workers, threads=worker_threads(threads))
    return ProcessExecutor(recipes, min(n, pending), worker_threads(threads), notify=say)
