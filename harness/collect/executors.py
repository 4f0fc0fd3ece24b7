"""Executors: who samples the chunks a run still needs.

- :class:`SerialExecutor`: the driver itself, one chunk at a time (engines already built).
- :class:`ProcessExecutor`: ``workers`` local worker processes (``spawn``), each building its
  engines once from their recipes and with its own torch thread count.
- :class:`~speceq.collect.ray_executor.RayExecutor`: tasks on a Ray cluster.

Every chunk is sampled from its own seed, whatever process samples it, so every executor
gives the same samples (bit for bit) for the same seed. Executors only sample: the driver
validates and stores each returned chunk (``on_result``, called in the driver's main thread).
A worker that dies is replaced and its chunk sampled again from the same seed, up to
:data:`MAX_ATTEMPTS` times. After a first Ctrl-C (``stop.requested``) no new chunk starts;
chunks already running are finished and stored.
"""

from __future__ import annotations

import multiprocessing
import signal
import sys
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Protocol

from speceq.collect.sampling import EngineRecipe, apply_worker_threads, decode_error, run_task, sample_chunk
from speceq.engines.base import Engine, SampleBatch
from speceq.errors import EngineError

#: Times a chunk is tried when the process sampling it dies (exit, kill, out of memory).
MAX_ATTEMPTS = 3

OnStart = Callable[[Any], None]
OnResult = Callable[[Any, SampleBatch, float], None]


class StopFlag(Protocol):
    requested: bool


class Executor(Protocol):
    """Samples chunks and hands each result to the driver."""

    description: str

    def run(self, chunks: Sequence[Any], on_start: OnStart, on_result: OnResult, stop: StopFlag) -> None: ...


class SerialExecutor:
    """Sample in the driver process with the engines it built."""

    def __init__(self, engines: Mapping[str, Engine]) -> None:
        self.engines = engines
        self.description = "serial, in this process"

    def run(self, chunks: Sequence[Any], on_start: OnStart, on_result: OnResult, stop: StopFlag) -> None:
        for chunk in chunks:
            if stop.requested:
                return
            on_start(chunk)
            batch, elapsed = sample_chunk(chunk, self.engines[chunk.role])
            on_result(chunk, batch, elapsed)


def _worker_main(conn: Connection, recipes: Mapping[str, EngineRecipe], threads: int) -> None:
    """Worker process loop: receive a chunk, send back ("ok", (batch, s)) or ("error", ...); None ends it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle
    apply_worker_threads(threads)
    while True:
        try:
            chunk = conn.recv()
        except EOFError:
            return
        if chunk is None:
            return
        conn.send(run_task(chunk, recipes[chunk.role]))


@dataclass
class _Worker:
    process: Any
    conn: Connection
    chunk: Any = None


class ProcessExecutor:
    """``workers`` local processes started with ``spawn`` (safe with torch threads, any platform)."""

    def __init__(self, recipes: Mapping[str, EngineRecipe], workers: int, threads: int,
                 notify: Callable[[str], None] = lambda s: print(f"speceq: {s}", file=sys.stderr)) -> None:
        self.recipes = dict(recipes)
        self.workers = workers
        self.threads = threads
        self.notify = notify
        self.description = f"{workers} worker processes, {threads} torch thread(s) each"
        self._ctx = multiprocessing.get_context("spawn")

    def _spawn(self) -> _Worker:
        parent, child = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(target=_worker_main, args=(child, self.recipes, self.threads),
                                    name="speceq-worker", daemon=True)
        process.start()
        child.close()
        return _Worker(process, parent)

    def run(self, chunks: Sequence[Any], on_start: OnStart, on_result: OnResult, stop: StopFlag) -> None:
        queue = deque(chunks)
        attempts: dict[int, int] = {}
        pool: list[_Worker] = []
        try:
            pool = [self._spawn() for _ in range(min(self.workers, len(queue)))]
            while True:
                for w in pool:
                    if w.chunk is None and queue and not stop.requested:
                        w.chunk = queue.popleft()
                        on_start(w.chunk)
                        w.conn.send(w.chunk)
                busy = [w for w in pool if w.chunk is not None]
                if not busy:
                    return
                ready = set(wait([w.conn for w in busy] + [w.process.sentinel for w in busy]))
                for i, w in enumerate(pool):
                    if w.chunk is None or (w.conn not in ready and w.process.sentinel not in ready):
                        continue
                    message = None
                    if w.conn.poll():
                        try:
                            message = w.conn.recv()
                        except (EOFError, OSError):
                            message = None
                    if message is None:  # the process died without answering
                        pool[i] = self._replace_dead(w, queue, attempts)
                        continue
                    chunk, (status, payload) = w.chunk, message
                    w.chunk = None
                    if status != "ok":
                        raise decode_error(payload, chunk)
                    batch, elapsed = payload
                    on_result(chunk, batch, elapsed)
        finally:
            self._shutdown(pool)

    def _replace_dead(self, w: _Worker, queue: deque, attempts: dict[int, int]) -> _Worker:
        chunk = w.chunk
        w.process.join(timeout=5)
        code = w.process.exitcode
        w.conn.close()
        n = attempts[id(chunk)] = attempts.get(id(chunk), 0) + 1
        if n >= MAX_ATTEMPTS:
            raise EngineError(f"the worker process sampling slice {chunk.slice_index} died {n} times "
                              f"(last exit code {code}); giving up", case_id=chunk.case.case_id)
        self.notify(f"worker process died (exit code {code}) while sampling {chunk.label()}; "
                    f"sampling it again from the same seed (attempt {n + 1} of {MAX_ATTEMPTS})")
        queue.appendleft(chunk)
        return self._spawn()

    @staticmethod
    def _shutdown(pool: list[_Worker]) -> None:
        for w in pool:
            try:
                if w.chunk is None:
                    w.conn.send(None)
            except (OSError, ValueError):
                pass
        for w in pool:
            if w.chunk is not None:  # still sampling: an error or a second Ctrl-C ended the run
                w.process.terminate()
            w.process.join(timeout=10)
            if w.process.is_alive():
                w.process.kill()
                w.process.join(timeout=5)
            w.conn.close()
