"""Executors: who samples the chunks a run still needs.

- :class:`SerialExecutor`: the driver itself, one chunk at a time (engines already built).
- :class:`ProcessExecutor`: ``workers`` local worker processes (:mod:`speceq.pipeline.collect.worker`),
  each building its engines once from their recipes and with its own torch thread count.
- :class:`~speceq.pipeline.collect.ray_executor.RayExecutor`: tasks on a Ray cluster.

Every chunk is sampled from its own seed, whatever process samples it, so every executor
gives the same samples (bit for bit) for the same seed. Executors only sample: the driver
validates and stores each returned chunk (``on_result``, called in the driver's main thread).
A worker that dies is replaced and its chunk sampled again from the same seed, up to
:data:`MAX_ATTEMPTS` times. After a first Ctrl-C (``stop.requested``) no new chunk starts;
chunks already running are finished and stored if they finish within
:data:`~speceq.core.defaults.STOP_GRACE_S`, else abandoned.

**Timeouts and hung engines.** ``run(..., timeout_s=T)`` makes a chunk still running after T
seconds an :class:`~speceq.errors.EngineError` naming the engine, case and slice. Python cannot
stop a thread, and an engine in this process may be stuck in C code (a torch kernel, a socket
read), so the serial executor samples each chunk on a daemon thread while the driver's main
thread waits in short steps (:data:`POLL_S`), free to see a timeout or a Ctrl-C; a chunk past its
time, or past the grace after Ctrl-C, is abandoned: its thread is left to finish (or hang) in
the background, its result is never stored, and the run stops. That is safe because the run
stops with it (nothing else uses the engine afterwards) and the store is written by the main
thread only. Worker processes are simply terminated. Ray tasks have no timeout here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Protocol

from speceq.core.defaults import STOP_GRACE_S
from speceq.engines.base import Engine, SampleBatch
from speceq.errors import EngineError
from speceq.pipeline.collect.sampling import (
    RECIPES_MESSAGE,
    EngineRecipe,
    decode_error,
    item_case_id,
    sample_chunk,
)

#: Times a chunk is tried when the process sampling it dies (exit, kill, out of memory).
MAX_ATTEMPTS = 3
#: Seconds between the driver's looks at running chunks (timeout, Ctrl-C).
POLL_S = 0.1

OnStart = Callable[[Any], None]
OnResult = Callable[[Any, SampleBatch, float], None]
#: Rows done inside a running chunk (chunk, rows), as its engine reports them (serial executor only).
OnRows = Callable[[Any, int], None]


class StopFlag(Protocol):
    requested: bool


class Executor(Protocol):
    """Samples chunks and hands each result to the driver; ``timeout_s``: seconds a chunk may take (None: no limit)."""

    description: str

    def run(self, chunks: Sequence[Any], on_start: OnStart, on_result: OnResult, stop: StopFlag, *,
            timeout_s: float | None = None, on_rows: OnRows | None = None) -> None: ...


def timed_out(chunk: Any, engine: str, timeout_s: float) -> EngineError:
    """The error of a chunk still running after ``timeout_s`` seconds: names the engine, case and slice."""
    return EngineError(f"slice {chunk.slice_index} ({chunk.role}) gave no result within the chunk timeout of "
                       f"{timeout_s:g} s, so it was abandoned; the chunks stored before it are kept (rerun to "
                       "resume; --chunk-timeout sets the limit)", engine=engine, case_id=chunk.case.case_id)


class _StopClock:
    """When a stop was first seen, and whether the grace for running chunks is over."""

    def __init__(self, stop: StopFlag) -> None:
        self.stop = stop
        self.since: float | None = None

    def grace_over(self, now: float) -> bool:
        if not self.stop.requested:
            return False
        if self.since is None:
            self.since = now
        return now - self.since >= STOP_GRACE_S


def sample_on_thread(chunk: Any, engine: Engine, stop: StopFlag, timeout_s: float | None,
                     on_rows: OnRows | None = None) -> tuple[SampleBatch, float] | None:
    """Sample ``chunk`` on a daemon thread; the result, or None when a Ctrl-C's grace ran out (chunk abandoned).

    Raises the chunk's own error, :func:`timed_out` past ``timeout_s``, and KeyboardInterrupt
    (a second Ctrl-C) at once. See the module docstring for why a thread.
    """
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["result"] = sample_chunk(chunk, engine, on_rows)
        except BaseException as e:  # handed to the driver's thread, which raises it
            box["error"] = e

    thread = threading.Thread(target=work, name=f"speceq-sample-{chunk.role}-{chunk.slice_index}", daemon=True)
    t0 = time.monotonic()
    clock = _StopClock(stop)
    thread.start()
    while True:
        thread.join(POLL_S)
        if not thread.is_alive():
            break
        now = time.monotonic()
        if timeout_s is not None and now - t0 >= timeout_s:
            raise timed_out(chunk, getattr(engine, "name", chunk.role), timeout_s)
        if clock.grace_over(now):
            return None
    if "error" in box:
        raise box["error"]
    return box["result"]


class SerialExecutor:
    """Sample in the driver process with the engines it built."""

    def __init__(self, engines: Mapping[str, Engine]) -> None:
        self.engines = engines
        self.description = "serial, in this process"

    def __enter__(self) -> SerialExecutor:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def run(self, chunks: Sequence[Any], on_start: OnStart, on_result: OnResult, stop: StopFlag, *,
            timeout_s: float | None = None, on_rows: OnRows | None = None) -> None:
        for chunk in chunks:
            if stop.requested:
                return
            on_start(chunk)
            got = sample_on_thread(chunk, self.engines[chunk.role], stop, timeout_s, on_rows)
            if got is None:  # Ctrl-C, and the chunk did not finish within the grace: abandoned
                return
            on_result(chunk, *got)


@dataclass
class _Worker:
    process: subprocess.Popen
    send: Connection  # driver -> worker
    recv: Connection  # worker -> driver
    chunk: Any = None
    ready: bool = False  # built its engines (said "ready"): its chunk's time counts from then
    since: float = 0.0  # when it was handed its chunk, or got ready (time.monotonic)


class ProcessExecutor:
    """``workers`` local processes (``python -m speceq.pipeline.collect.worker``), each building its engines once.

    Used as a context manager (``with executor:``) the worker processes stay up between calls
    of :meth:`run` (a run's collection, then its oracle scoring: engines and models are loaded
    once per worker); otherwise every :meth:`run` starts and stops its own.
    """

    def __init__(self, recipes: Mapping[str, EngineRecipe], workers: int, threads: int,
                 notify: Callable[[str], None] = lambda s: print(f"speceq: {s}", file=sys.stderr)) -> None:
        self.recipes = dict(recipes)
        self.workers = workers
        self.threads = threads
        self.notify = notify
        self.description = f"{workers} worker processes, {threads} torch thread(s) each"
        self.started = 0  # worker processes started so far (replacements of dead ones included)
        self._keep = False
        self._pool: list[_Worker] = []

    def __enter__(self) -> ProcessExecutor:
        self._keep = True
        return self

    def __exit__(self, *exc: Any) -> None:
        self._keep = False
        self._shutdown(self._pool)
        self._pool = []

    def start(self) -> None:
        """Start every worker now (kept up until the ``with`` block ends), so they load their engines early."""
        self._keep = True
        while len(self._pool) < self.workers:
            self._pool.append(self._spawn())

    def use_recipes(self, recipes: Mapping[str, EngineRecipe]) -> None:
        """Sample with ``recipes`` from now on, in the running workers too (a kept pool serving another run).

        Each worker builds an engine once per recipe and keeps it, so switching back costs nothing.
        """
        recipes = dict(recipes)
        if recipes == self.recipes:
            return
        self.recipes = recipes
        for w in self._pool:
            try:
                w.send.send((RECIPES_MESSAGE, recipes))
            except OSError:  # died while idle: its pipe answers EOF when it is handed a chunk
                pass

    def _spawn(self) -> _Worker:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        # the worker imports what this process can: its sys.path (engine modules next to a script, tests)
        path = os.pathsep.join(p for p in [*sys.path, os.environ.get("PYTHONPATH", "")] if p)
        try:
            process = subprocess.Popen([sys.executable, "-m", "speceq.pipeline.collect.worker", str(to_child_r),
                                        str(from_child_w), str(os.getpid())], pass_fds=(to_child_r, from_child_w),
                                       env={**os.environ, "PYTHONPATH": path}, stdin=subprocess.DEVNULL)
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        worker = _Worker(process, Connection(to_child_w, readable=False), Connection(from_child_r, writable=False))
        worker.send.send((self.recipes, self.threads))
        self.started += 1
        return worker

    def run(self, chunks: Sequence[Any], on_start: OnStart, on_result: OnResult, stop: StopFlag, *,
            timeout_s: float | None = None, on_rows: OnRows | None = None) -> None:
        """Hand out ``chunks`` (chunks to sample, or oracle tasks) and pass each result to ``on_result``.

        ``on_rows(chunk, done)``: rows the engine reports inside a chunk (a worker sends at most one
        such message a second).

        A worker past ``timeout_s`` on one chunk, or still busy :data:`STOP_GRACE_S` after a
        Ctrl-C, is terminated with the pool (a timeout raises :func:`timed_out`).
        """
        queue = deque(chunks)
        if not queue:
            return
        attempts: dict[int, int] = {}
        pool = self._pool
        want = self.workers if self._keep else min(self.workers, len(queue))
        ok = False
        clock = _StopClock(stop)
        try:
            while len(pool) < want:
                pool.append(self._spawn())
            while True:
                for w in pool:
                    if w.chunk is None and queue and not stop.requested:
                        w.chunk, w.since = queue.popleft(), time.monotonic()
                        on_start(w.chunk)
                        try:
                            w.send.send(w.chunk)
                        except OSError:  # died while idle: its pipe answers EOF below
                            pass
                busy = [w for w in pool if w.chunk is not None]
                if not busy:
                    ok = True
                    return
                ready = set(wait([w.recv for w in busy], timeout=POLL_S))  # a dead worker's pipe is readable (EOF)
                now = time.monotonic()
                if not ready and clock.grace_over(now):
                    return  # Ctrl-C: the chunks still running are abandoned (workers terminated below)
                late = [w for w in busy if w.ready and w.recv not in ready and timeout_s is not None
                        and now - w.since >= timeout_s]
                if late:
                    spec = self.recipes[late[0].chunk.role].spec or late[0].chunk.role
                    raise timed_out(late[0].chunk, spec, float(timeout_s or 0))
                for i, w in enumerate(pool):
                    if w.chunk is None or w.recv not in ready:
                        continue
                    try:
                        message = w.recv.recv()
                    except (EOFError, OSError):
                        message = None
                    if message is None:  # the process died without answering
                        pool[i] = self._replace_dead(w, queue, attempts)
                        continue
                    if message[0] == "ready":  # start-up done: the chunk's own time starts now
                        w.ready, w.since = True, time.monotonic()
                        continue
                    if message[0] == "rows":  # rows done inside the chunk, as its engine reports them
                        if on_rows is not None:
                            on_rows(w.chunk, int(message[1]))
                        continue
                    chunk, (status, payload) = w.chunk, message
                    w.chunk = None
                    if status != "ok":
                        raise decode_error(payload, chunk)
                    batch, elapsed = payload
                    on_result(chunk, batch, elapsed)
        finally:
            if not (ok and self._keep):  # an error or Ctrl-C ends the pool; a kept pool lives on between runs
                self._shutdown(pool)
                pool.clear()

    def _replace_dead(self, w: _Worker, queue: deque, attempts: dict[int, int]) -> _Worker:
        chunk = w.chunk
        try:
            code = w.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            w.process.kill()
            code = w.process.wait()
        w.send.close()
        w.recv.close()
        n = attempts[id(chunk)] = attempts.get(id(chunk), 0) + 1
        if n >= MAX_ATTEMPTS:
            raise EngineError(f"the worker process running {chunk.label()} died {n} times "
                              f"(last exit code {code}); giving up", case_id=item_case_id(chunk))
        doing, again = (("sampling", "sampling it again from the same seed") if hasattr(chunk, "slice_index")
                        else ("scoring", "scoring it again"))
        self.notify(f"worker process died (exit code {code}) while {doing} {chunk.label()}; "
                    f"{again} (attempt {n + 1} of {MAX_ATTEMPTS})")
        queue.appendleft(chunk)
        return self._spawn()

    @staticmethod
    def _shutdown(pool: list[_Worker]) -> None:
        for w in pool:
            try:
                if w.chunk is None:
                    w.send.send(None)
            except (OSError, ValueError):
                pass
        for w in pool:
            if w.chunk is not None:  # still sampling: an error or a second Ctrl-C ended the run
                w.process.terminate()
            try:
                w.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                w.process.kill()
                w.process.wait()
            w.send.close()
            w.recv.close()
