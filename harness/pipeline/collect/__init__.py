"""Collection machinery behind :func:`speceq.pipeline.runner.collect`: executors, engine recipes, progress,
and the code identity that goes into every chunk's fingerprint.

Which executor samples (see :mod:`speceq.pipeline.collect.executors`):

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

import math
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from speceq.engines.base import Engine
from speceq.pipeline.collect.executors import Executor, ProcessExecutor, SerialExecutor
from speceq.pipeline.collect.sampling import THREADS_ENV, EngineRecipe, recipe_from_object, recipe_from_spec

EXECUTORS: tuple[str, ...] = ("local", "ray")

__all__ = ["EXECUTORS", "Executor", "ProcessExecutor", "SerialExecutor", "auto_workers", "choose_executor",
           "engine_recipes", "own_load_share", "usable_cpus", "worker_threads"]


def usable_cpus() -> int:
    """CPUs this process may run on (affinity mask where the platform has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


#: A CPU counts as idle for ``--workers auto`` when other processes leave at least this fraction of it.
IDLE_FRACTION = 0.25


def own_load_share() -> float:
    """This process's share of the 1-minute load average (0..1): what it has itself put there.

    The driver imports torch and loads its engines before it picks a worker count, so the load
    average it reads already counts itself (about 0.2-0.5 after 15-40 s of loading). A
    process that was busy a fraction ``u`` of its ``e`` seconds of life adds about
    ``u (1 - exp(-e / 60))`` to the exponentially damped 1-minute figure. 0 where the platform
    does not say how long the process has lived (not Linux).
    """
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            start_ticks = int(f.read().rpartition(")")[2].split()[19])  # field 22: start time, clock ticks
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        elapsed = uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return 0.0
    if elapsed <= 0:
        return 0.0
    t = os.times()
    busy = min(1.0, (t.user + t.system) / elapsed)
    return busy * (1.0 - math.exp(-elapsed / 60.0))


def auto_workers(pending: int, *, load: float | None = None, own: float | None = None) -> int:
    """Default worker count: the CPUs other processes leave idle, at least 1, at most one per chunk to sample.

    One worker per CPU that other processes leave at least :data:`IDLE_FRACTION` idle: the
    load of other processes is the 1-minute load average (``load``; read from the system when
    None, 0 where the platform has none) minus this process's own share of it (``own``;
    :func:`own_load_share` when None). The old rule (CPUs minus the whole load average,
    rounded half up) chose serial on a nearly idle 2-core machine: a load of 0.5 from anything,
    the driver's own loading included, left "1.5 idle CPUs", rounded to 1, although a second
    worker process gets most of a CPU there (each CPU's time is shared among the runnable
    processes). On an idle 2-core
    machine this is 2 worker processes (each with 1 torch thread: more threads per process
    were measured slower). On the shared, busy 2-core development machine (load 14-17) 2
    workers sampled the default run's chunks no faster than 1 (each chunk took 1.77x longer,
    docs/SCALE.md), so a machine whose cores other jobs already use gets 1 worker, which also
    spares the worker start-up.
    """
    cpus = usable_cpus()
    if load is None:
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):  # Windows; no load figure
            load = 0.0
    if own is None:
        own = own_load_share()
    others = max(0.0, load - own)
    idle = math.ceil(cpus - others - IDLE_FRACTION)  # CPUs at least IDLE_FRACTION idle
    return max(1, min(cpus, idle, pending))


def auto_workers_reason(pending: int) -> tuple[int, str]:
    """``--workers auto``'s count and why, for the run's log line."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = 0.0
    own = own_load_share()
    n = auto_workers(pending, load=load, own=own)
    return n, (f"--workers auto: {n} ({usable_cpus()} usable CPUs, 1-minute load {load:.2f} of which {own:.2f} "
               f"this process, {pending} items to run)")


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
