"""Local worker processes kept up across the runs of one process: the checks of a pytest session.

``speceq run`` starts its worker processes once per run, and they serve its collection and its
oracle scoring. A pytest session makes one run per check, 25 of them for the ready-made suites,
and a worker's start (importing torch, building the engines) costs seconds of CPU, so starting
workers per check would cost more than they save. A :class:`WorkerPool` starts them at the first
run that uses workers and hands the same processes to every later run:
:meth:`~speceq.pipeline.collect.executors.ProcessExecutor.use_recipes` gives them that run's
engines, and each worker builds an engine once and keeps it.

Each run still picks its count as ``speceq run`` does: ``workers`` fixed, or None (auto:
:func:`~speceq.pipeline.collect.auto_workers`, measured when the run starts sampling), auto
capped at ``limit`` when one is given (a share of the CPUs, e.g. per pytest-xdist process). A run
the count leaves at 1, or with a single chunk to sample, samples in this process while the
workers wait. The samples are the same whatever process draws them (each chunk has its own seed).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

from speceq.engines.base import Engine
from speceq.pipeline.collect import auto_workers_reason, engine_recipes, worker_threads
from speceq.pipeline.collect.executors import Executor, ProcessExecutor, SerialExecutor


class WorkerPool:
    """Worker processes shared by several runs (see the module docstring); close it, or use it as a context manager.

    ``workers``: worker processes per run (None: auto); ``threads``: torch threads per worker
    (None: ``$SPECEQ_TORCH_THREADS``, else 1); ``limit``: the most auto may choose (None: no cap).
    """

    def __init__(self, *, workers: int | None, threads: int | None, limit: int | None = None,
                 notify: Callable[[str], None] | None = None) -> None:
        if workers is not None and workers < 1:
            raise ValueError(f"workers must be >= 1 or None (auto), got {workers}")
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be >= 1 or None, got {limit}")
        self.workers = workers
        self.threads = threads
        self.limit = limit
        self._say = notify or (lambda s: print(f"speceq: {s}", file=sys.stderr))
        self._executor: ProcessExecutor | None = None
        self._specs: dict[int, tuple[Engine, tuple[str, Mapping[str, Any]]]] = {}  # id -> (engine, its spec)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def started(self) -> int:
        """Worker processes started so far (0 while every run sampled in this process)."""
        return 0 if self._executor is None else self._executor.started

    def know(self, engine: Engine, spec: str, options: Mapping[str, Any]) -> None:
        """``engine`` was resolved from ``spec`` with ``options``: workers rebuild it from them (nothing is pickled)."""
        self._specs[id(engine)] = (engine, (spec, dict(options)))

    def count(self, pending: int) -> tuple[int, str]:
        """Worker processes for a run with ``pending`` chunks to sample, and why (empty when fixed)."""
        if self.workers is not None:
            return self.workers, ""
        n, why = auto_workers_reason(pending)
        if self.limit is not None and n > self.limit:
            n, why = self.limit, f"{why}; capped at {self.limit} (this process's share of the CPUs)"
        return n, why

    def executor(self, engines: Mapping[str, Engine], specs: Mapping[str, tuple[str, Mapping[str, Any]]] | None,
                 pending: int) -> Executor:
        """The executor of a run with ``engines`` and ``pending`` chunks: the kept workers, or this process."""
        n, why = self.count(pending)
        want = min(n, pending)
        if want <= 1:
            serial = SerialExecutor(engines)
            if why and pending > 0:  # auto chose this process: say why, as speceq run does
                serial.description += f"; {why}"
            return serial
        if specs is None:  # engines handed over as objects: those known to come from a spec are rebuilt from it
            specs = {role: self._specs[id(e)][1] for role, e in engines.items() if id(e) in self._specs}
        recipes = engine_recipes(engines, specs)
        if isinstance(recipes, str):
            self._say(f"sampling serially: {recipes}; pass the engine as a spec string ('module:attr' or "
                      "'file.py:attr') to use worker processes")
            return SerialExecutor(engines)
        if self._executor is None:
            self._executor = ProcessExecutor(recipes, want, worker_threads(self.threads), notify=self._say)
            self._executor.__enter__()  # kept: the workers stay up between runs
        else:
            self._executor.use_recipes(recipes)
            self._executor.workers = max(self._executor.workers, want)
        ex = self._executor
        ex.description = (f"{ex.workers} worker processes kept across runs, {ex.threads} torch thread(s) each"
                          + (f"; {why}" if why else ""))
        return ex

    def close(self) -> None:
        """Stop the worker processes (a later run starts new ones)."""
        if self._executor is not None:
            self._executor.__exit__(None, None, None)
            self._executor = None


__all__ = ["WorkerPool"]
