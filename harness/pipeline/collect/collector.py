"""The one collection path of both run loops: reuse stored chunks, sample the others, validate and store them.

The fixed-size loop hands :class:`ChunkCollector` every chunk of its plan at once; the
sequential loop hands it the next slice of every open case, look by look. Either way the
collector

- reuses every chunk already stored under the same fingerprint (identity from
  :func:`speceq.pipeline.plan.plan_chunk`, which covers the engine's code), and discards the
  store first when the run does not resume;
- samples the missing ones on the run's executor (serial, worker processes or Ray), checks each
  returned batch with :func:`~speceq.engines.base.validate_batch` and stores it atomically, in
  this process only;
- shows progress (a bar on a terminal, plain lines in a log: :mod:`speceq.pipeline.collect.progress`)
  over the rows the run expects;
- stops the run with an engine error when a chunk takes longer than the run's chunk timeout;
- while it samples, turns the first Ctrl-C into "stop after the chunks being sampled are stored"
  (waiting at most :data:`~speceq.core.defaults.STOP_GRACE_S` for them; a second Ctrl-C stops at
  once); a Ctrl-C at any time in its ``with`` block (during a sequential look's scoring, too) ends in
  :class:`~speceq.pipeline.stopping.RunInterrupted`, saying how much is stored and how to resume.

A failure stops the run and keeps every chunk stored before it.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from speceq.core.provenance import utc_now
from speceq.engines.base import Engine, SampleBatch, validate_batch
from speceq.pipeline.collect.executors import Executor
from speceq.pipeline.collect.progress import Progress, make_progress
from speceq.pipeline.stopping import RunInterrupted, StopRequest, interrupted_message
from speceq.store import SampleStore


class ChunkCollector:
    """Collects planned chunks into one store for a whole run; use as a context manager.

    ``executor``: the executor for a number of chunks still to sample (the run's session, or a
    fresh choice). ``expected``: every chunk the run may collect (what progress counts against;
    a sequential run's cases may stop before their last slice, see :meth:`settle`).
    ``resume`` False discards the store's chunks on entry. ``out_dir``: named in the resume hint.
    ``chunk_timeout``: seconds one chunk may take (None: no limit; past it, an
    :class:`~speceq.errors.EngineError` naming engine, case and slice, stored chunks kept).
    """

    def __init__(self, store: SampleStore, engines: Mapping[str, Engine], executor: Callable[[int], Executor], *,
                 expected: Sequence[Any], resume: bool, progress: bool, out_dir: Path,
                 chunk_timeout: float | None = None) -> None:
        self.store = store
        self.engines = engines
        self._executor = executor
        self._expected = list(expected)
        self._resume = resume
        self._show = progress
        self._out_dir = out_dir
        self._timeout = chunk_timeout
        self.reused = self.sampled = self.requested = 0
        self._description: str | None = None
        self._progress: Progress | None = None

    def __enter__(self) -> ChunkCollector:
        self.store.acquire_writer_lock()
        try:
            if not self._resume:
                self.store.discard_all()
            self._progress = make_progress(self._show, self._expected, []).__enter__()
        except BaseException:
            self.store.release_writer_lock()
            raise
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        """Stop the progress, release the store; a Ctrl-C between samplings (a sequential look) says how to resume."""
        try:
            if self._progress is not None:
                self._progress.__exit__(exc_type, exc, tb)
        finally:
            self._progress = None
            self.store.release_writer_lock()
        if exc_type is KeyboardInterrupt:
            raise self._interrupted() from None

    def _interrupted(self, signum: int = signal.SIGINT) -> RunInterrupted:
        return RunInterrupted(interrupted_message(self._out_dir, self.reused + self.sampled, self.requested),
                              signum=signum)

    def gather(self, chunks: Sequence[Any]) -> list[SampleBatch]:
        """The stored batch of every chunk of ``chunks`` (in order), sampling and storing those not yet stored."""
        if self._progress is None:
            raise RuntimeError("ChunkCollector.gather outside its with block")
        progress = self._progress
        self.requested += len(chunks)
        missing = []
        for chunk in chunks:  # a changed configuration fails here, before any sampling
            if self.store.has(chunk.key):
                self.reused += 1
                progress.reused(chunk)
            else:
                missing.append(chunk)
        if missing:
            executor = self._executor(len(missing))
            self._description = executor.description

            def store_chunk(chunk: Any, batch: SampleBatch, elapsed: float) -> None:
                validate_batch(batch, chunk.request(), self.engines[chunk.role], case_id=chunk.case.case_id,
                               role=chunk.role)
                self.store.put(chunk.key, batch, {"elapsed_s": elapsed, "created": utc_now()})
                self.sampled += 1
                progress.finished(chunk)

            before = self.sampled
            with StopRequest() as stop:  # only while sampling: elsewhere Ctrl-C interrupts at once
                try:
                    executor.run(missing, progress.started, store_chunk, stop, timeout_s=self._timeout,
                                 on_rows=progress.rows)
                except KeyboardInterrupt:
                    raise self._interrupted(stop.signum) from None
            if stop.requested and self.sampled - before < len(missing):
                raise self._interrupted(stop.signum)
        return [self.store.get(c.key) for c in chunks]  # exactly what is stored, reused or just written

    @property
    def executor_description(self) -> str:
        """Who sampled: the executor of the last round that sampled, else the one the run would use now."""
        if self._description is None:
            self._description = self._executor(0).description
        return self._description

    def settle(self, case_id: str) -> None:
        """A case is decided: progress stops counting its slices not yet collected."""
        if self._progress is not None:
            self._progress.settle(case_id)


__all__ = ["ChunkCollector"]
