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
chunks already running are finished and stored.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Protocol

from speceq.engines.base import Engine, SampleBatch
from speceq.errors import EngineError
from speceq.pipeline.collect.sampling import EngineRecipe, decode_error, item_case_id, sample_chunk

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

    def __enter__(self) -> SerialExecutor:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def run(self, chunks: Sequence[Any], on_start: OnStart, on_result: OnResult, stop: StopFlag) -> None:
        for chunk in chunks:
            if stop.requested:
                return
            on_start(chunk)
            batch, elapsed = sample_chunk(chunk, self.engines[chunk.role])
            on_result(chunk, batch, elapsed)


@dataclass
class _Worker:
    process: subprocess.Popen
    send: Connection  # driver -> worker
    recv: Connection  # worker -> driver
    chunk: Any = None


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

    def _spawn(self) -> _Worker:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        # the worker imports what this process can: its sys.path (engine modules next to a script, tests)
        path = os.pathsep.join(p for p in [*sys.path, os.environ.get("PYTHONPATH", "")] if p)
        try:
            process = subprocess.Popen([sys.executable, "-m", "speceq.pipeline.collect.worker", str(to_child_r),
                                        str(from_child_w)], pass_fds=(to_child_r, from_child_w),
                                       env={**os.environ, "PYTHONPATH": path}, stdin=subprocess.DEVNULL)
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        worker = _Worker(process, Connection(to_child_w, readable=False), Connection(from_child_r, writable=False))
        worker.send.send((self.recipes, self.threads))
        return worker

    def run(self, chunks: Sequence[Any], on_start: OnStart, on_result: OnResult, stop: StopFlag) -> None:
        """Hand out ``chunks`` (chunks to sample, or oracle tasks) and pass each result to ``on_result``."""
        queue = deque(chunks)
        if not queue:
            return
        attempts: dict[int, int] = {}
        pool = self._pool
        want = self.workers if self._keep else min(self.workers, len(queue))
        ok = False
        try:
            while len(pool) < want:
                pool.append(self._spawn())
            while True:
                for w in pool:
                    if w.chunk is None and queue and not stop.requested:
                        w.chunk = queue.popleft()
                        on_start(w.chunk)
                        try:
                            w.send.send(w.chunk)
                        except OSError:  # died while idle: its pipe answers EOF below
                            pass
                busy = [w for w in pool if w.chunk is not None]
                if not busy:
                    ok = True
                    return
                ready = set(wait([w.recv for w in busy]))  # a dead worker's pipe is readable (EOF)
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
