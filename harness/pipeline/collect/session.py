"""One executor for a whole run: collection, then oracle scoring, with the same worker processes.

:class:`ExecutorSession` picks the executor the first time work is handed to it (with the count
of items then pending, as :func:`speceq.pipeline.collect.choose_executor` wants) and keeps a parallel
executor's workers up until the session closes, so engines and models are loaded once per
worker. Given a :class:`~speceq.pipeline.collect.pool.WorkerPool` (workers its caller keeps across
runs, as a pytest session does), it takes the pool's workers instead and leaves them running. :meth:`ExecutorSession.prefetch_scores` starts scoring the oracle requests the analysis
will make on worker processes, in a background thread of the driver, and returns the
:class:`~speceq.pipeline.collect.oracle_tasks.PrefetchedOracle` the analysis uses: its ``score`` waits
for a request's parts, so the driver analyses case 1 while the workers score case 2.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from speceq.core.params import SamplingParams
from speceq.engines.base import Engine, SampleBatch
from speceq.oracles.build import ModelSource
from speceq.oracles.protocol import Oracle
from speceq.pipeline.collect import choose_executor
from speceq.pipeline.collect.executors import Executor, ProcessExecutor, SerialExecutor
from speceq.pipeline.collect.oracle_tasks import (
    OracleScoreTask,
    PrefetchedOracle,
    oracle_recipe,
    plan_score_tasks,
)
from speceq.pipeline.collect.pool import WorkerPool

#: One oracle ``score`` request of the analysis: (case id, prompts, rows, sampling parameters).
ScoreRequest = tuple[str, Sequence[Sequence[int]], SampleBatch, SamplingParams]


class _Stop:
    requested = False


class ExecutorSession:
    """The executor of one run (see the module docstring); use as a context manager."""

    def __init__(self, *, executor: str, workers: int | None, ray_address: str | None, threads: int | None,
                 engines: Mapping[str, Engine] | None, specs: Mapping[str, tuple[str, Mapping[str, Any]]] | None,
                 notify: Callable[[str], None] | None = None, pool: WorkerPool | None = None) -> None:
        self._choice = {"executor": executor, "workers": workers, "ray_address": ray_address, "threads": threads,
                        "engines": engines, "specs": specs, "notify": notify}
        self._pool = pool if executor == "local" else None  # workers kept by the caller across runs
        self._open: Executor | None = None
        self._borrowed = False  # _open is the pool's: left running at close
        self._thread: threading.Thread | None = None
        self._stop = _Stop()

    def __enter__(self) -> ExecutorSession:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def set_engines(self, engines: Mapping[str, Engine]) -> None:
        """The driver's engines, once loaded (a serial executor samples with them)."""
        self._choice["engines"] = engines

    def prestart(self, pending: int) -> None:
        """Start local worker processes before the driver loads its engines, when the run will use them.

        Only for engines given as spec strings (workers build them from the specs) and the
        local executor: workers then import torch and load their models while the driver
        loads its own, instead of after. ``pending``: the chunks the run plans (an upper
        bound of those still to sample).
        """
        if (self._open is not None or self._pool is not None or self._choice["specs"] is None
                or self._choice["executor"] != "local"):
            return
        chosen = choose_executor(pending=pending, **{**self._choice, "engines": self._choice["engines"] or {}})
        if isinstance(chosen, ProcessExecutor):
            chosen.__enter__()
            chosen.start()
            self._open = chosen

    def executor(self, pending: int) -> Executor:
        """The run's executor for ``pending`` items: the open parallel one, else a fresh choice."""
        if self._open is not None:
            return self._open
        if self._pool is not None:
            chosen = self._pool.executor(self._choice["engines"] or {}, self._choice["specs"], pending)
            if not isinstance(chosen, SerialExecutor):
                self._open, self._borrowed = chosen, True
            return chosen
        chosen = choose_executor(pending=pending, **self._choice)
        if not isinstance(chosen, SerialExecutor):
            chosen.__enter__()  # type: ignore[attr-defined]
            self._open = chosen
        return chosen

    @property
    def description(self) -> str:
        """Who runs the work now: the open parallel executor, else this process."""
        return self._open.description if self._open is not None else "serial, in this process"

    def close(self) -> None:
        """Stop handing out oracle tasks, wait for those running, and stop the workers."""
        self._stop.requested = True
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._open is not None and not self._borrowed:
            self._open.__exit__(None, None, None)  # type: ignore[attr-defined]
        self._open, self._borrowed = None, False

    def prefetch_scores(self, oracle: Oracle, requests: Sequence[ScoreRequest], *, target: ModelSource,
                        draft: ModelSource | None) -> Oracle:
        """Score ``requests`` ((case id, prompts, rows, params), in the order the analysis asks) on the workers.

        Returns the oracle for the analysis: a :class:`PrefetchedOracle` answering these
        requests from the workers, or ``oracle`` itself when scoring stays in the driver
        (serial executor, an oracle that is not a CPU ``TargetOracle``, nothing to score).
        """
        recipe = oracle_recipe(oracle, target=target, draft=draft)
        if recipe is None or not requests:
            return oracle
        if self._thread is not None:  # one scoring thread at a time: the previous batch of requests first
            self._thread.join()
            self._thread = None
        executor = self.executor(pending=2 * len(requests))
        if isinstance(executor, SerialExecutor):
            return oracle
        parts = max(2, int(getattr(executor, "workers", None) or 2))
        proxy = PrefetchedOracle(oracle)
        tasks: list[OracleScoreTask] = []
        for case_id, prompts, batch, params in requests:
            planned = plan_score_tasks(case_id, prompts, batch, params, recipe, oracle.vocab_size, parts)
            if planned:
                proxy.expect(planned[0].request, batch, len(planned))
                tasks.extend(planned)
        if not tasks:
            return oracle

        def work() -> None:
            try:
                executor.run(tasks, lambda task: None, proxy.deliver, self._stop)
                if self._stop.requested:
                    proxy.fail(RuntimeError("oracle scoring was stopped"))
            except BaseException as e:  # handed to the analysis thread, which raises it
                print(f"speceq: oracle scoring in the workers failed: {type(e).__name__}: {e}", file=sys.stderr)
                proxy.fail(e)

        self._thread = threading.Thread(target=work, name="speceq-oracle-scoring", daemon=True)
        self._thread.start()
        return proxy
