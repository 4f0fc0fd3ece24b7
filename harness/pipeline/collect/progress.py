"""Collection progress: a rich bar on a terminal, plain lines elsewhere (CI logs), or nothing.

Both count rows (samples per engine). Outside a terminal each case gets at most one line per
:data:`LINE_INTERVAL_S` (30 s): when a chunk of it is stored, each engine's rows done / expected
and an ETA from that engine's pace on the case so far in this run (reused chunks count as done,
not in the pace), e.g.::

    speceq: case 'chat': baseline 500/500 rows (done); candidate 250/500 rows, ETA 4 min 10 s; 12 min 30 s in all

While a chunk runs and its case had no line for 30 s, the line starts with what runs (``still
sampling candidate slice 1 (125 rows), 45 s on it``, with the time left at the engine's pace
once it has one), so a CI log is never silent for long. An engine that reports rows inside a
chunk (:func:`speceq.engines.row_progress.report_rows`, called by the ``hf-*`` engines after each
row or batch; not on Ray) makes that line say how far the chunk is, with the time
left at its pace within the chunk (``still sampling candidate slice 0: 120/500 rows, 2 min 00 s
on it, about 6 min 20 s left``); other engines move chunk by chunk (``--chunk-size``).
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TextIO

#: Plain lines: at most one line per case in this many seconds.
LINE_INTERVAL_S = 30.0


class ChunkLike(Protocol):
    role: str
    slice_index: int
    n: int

    @property
    def case(self) -> Any: ...

    def label(self) -> str: ...


class Progress(Protocol):
    """What collection reports: the chunks a worker started, and the chunks that were stored."""

    def __enter__(self) -> Progress: ...
    def __exit__(self, *exc: Any) -> None: ...
    def started(self, chunk: ChunkLike) -> None: ...
    def finished(self, chunk: ChunkLike) -> None: ...
    def reused(self, chunk: ChunkLike) -> None: ...
    def settle(self, case_id: str) -> None: ...
    def rows(self, chunk: ChunkLike, done: int) -> None: ...


def _group(chunk: ChunkLike) -> tuple[str, str]:
    return chunk.role, chunk.case.case_id


class NoProgress:
    """Prints nothing."""

    def __enter__(self) -> NoProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def started(self, chunk: ChunkLike) -> None:
        return None

    def finished(self, chunk: ChunkLike) -> None:
        return None

    def reused(self, chunk: ChunkLike) -> None:
        return None

    def settle(self, case_id: str) -> None:
        return None

    def rows(self, chunk: ChunkLike, done: int) -> None:
        return None


class BarProgress:
    """The rich progress bar over every row the run expects (terminals only)."""

    def __init__(self, chunks: Sequence[ChunkLike], done: Sequence[ChunkLike], console: Any) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.progress import Progress as RichProgress

        self._bar = RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=console,
                                 transient=True)
        self._total = sum(c.n for c in chunks)
        self._task = self._bar.add_task("collecting rows", total=self._total, completed=sum(c.n for c in done))
        self._open: Counter[str] = Counter()  # case id -> expected rows not yet collected
        for c in chunks:
            self._open[c.case.case_id] += c.n
        for c in done:
            self._open[c.case.case_id] -= c.n
        self._inside: dict[int, int] = {}  # id(chunk) -> rows already advanced inside it

    def __enter__(self) -> BarProgress:
        self._bar.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._bar.__exit__(*exc)

    def started(self, chunk: ChunkLike) -> None:
        self._bar.update(self._task, description=chunk.label())

    def finished(self, chunk: ChunkLike) -> None:
        self._open[chunk.case.case_id] -= chunk.n
        self._bar.advance(self._task, chunk.n - self._inside.pop(id(chunk), 0))

    def rows(self, chunk: ChunkLike, done: int) -> None:
        """Rows done inside a running chunk: the bar moves by what is new."""
        done = min(max(done, 0), chunk.n)
        before = self._inside.get(id(chunk), 0)
        if done > before:
            self._inside[id(chunk)] = done
            self._bar.advance(self._task, done - before)

    def reused(self, chunk: ChunkLike) -> None:
        self.finished(chunk)

    def settle(self, case_id: str) -> None:
        self._total -= max(0, self._open.pop(case_id, 0))
        self._bar.update(self._task, total=self._total)


def duration(seconds: float) -> str:
    """``45 s``, ``3 min 05 s``, ``2 h 07 min``: a time for a log line."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class _Rows:
    """One engine on one case: rows expected and done, and the pace of the rows sampled in this run."""

    def __init__(self) -> None:
        self.total = self.done = self.sampled = 0
        self.first_start: float | None = None
        self.last_finish: float | None = None

    def pace(self) -> float | None:
        """Rows per second sampled in this run (None before its first sampled chunk)."""
        if not self.sampled or self.first_start is None or self.last_finish is None:
            return None
        return self.sampled / max(self.last_finish - self.first_start, 1e-9)

    def describe(self, role: str) -> str:
        text = f"{role} {self.done}/{self.total} rows"
        if self.done >= self.total:
            return f"{text} (done)"
        pace = self.pace()
        return f"{text}, ETA {duration((self.total - self.done) / pace)}" if pace else text


class LineProgress:
    """Plain progress lines for logs (see the module docstring); ``clock``: seconds, for tests."""

    def __init__(self, chunks: Sequence[ChunkLike], done: Sequence[ChunkLike], stream: TextIO,
                 clock: Callable[[], float] = time.monotonic, heartbeat: bool = True) -> None:
        self._rows: dict[tuple[str, str], _Rows] = {}
        for c in chunks:
            self._group(c).total += c.n
        for c in done:
            self._group(c).done += c.n
        self._stream = stream
        self._clock = clock
        self._t0 = clock()
        self._last_line: dict[str, float] = {}  # case id -> time of its last line
        self._running: dict[int, tuple[ChunkLike, float]] = {}  # id(chunk) -> (chunk, start time)
        self._inside: dict[int, int] = {}  # id(chunk) -> rows its engine reported done
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True) if heartbeat else None

    def _group(self, chunk: ChunkLike) -> _Rows:
        return self._rows.setdefault(_group(chunk), _Rows())

    def __enter__(self) -> LineProgress:
        if self._thread is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    def _may_print(self, case_id: str, now: float) -> bool:
        last = self._last_line.get(case_id)
        return last is None or now - last >= LINE_INTERVAL_S

    def _case_line(self, case_id: str, now: float, running: str = "") -> None:
        """One line for a case: ``running`` (a chunk still sampling) first, then each engine's rows and ETA."""
        self._last_line[case_id] = now
        parts = [running] if running else []
        parts += [rows.describe(role) for (role, cid), rows in self._rows.items() if cid == case_id]
        print(f"speceq: case {case_id!r}: {'; '.join(parts)}; {duration(now - self._t0)} in all",
              file=self._stream, flush=True)

    def started(self, chunk: ChunkLike) -> None:
        with self._lock:
            now = self._clock()
            self._running[id(chunk)] = (chunk, now)
            rows = self._group(chunk)
            if rows.first_start is None:
                rows.first_start = now

    def finished(self, chunk: ChunkLike) -> None:
        """A chunk was stored: a line for its case unless that case had one in the last :data:`LINE_INTERVAL_S`."""
        with self._lock:
            now = self._clock()
            self._running.pop(id(chunk), None)
            self._inside.pop(id(chunk), None)
            rows = self._group(chunk)
            rows.done += chunk.n
            rows.sampled += chunk.n
            rows.last_finish = now
            if self._may_print(chunk.case.case_id, now):
                self._case_line(chunk.case.case_id, now)

    def reused(self, chunk: ChunkLike) -> None:
        """A chunk found in the store: counted as done, no line."""
        with self._lock:
            self._group(chunk).done += chunk.n

    def rows(self, chunk: ChunkLike, done: int) -> None:
        """Rows done inside a running chunk, as its engine reports them (shown in the "still sampling" line)."""
        with self._lock:
            if id(chunk) in self._running:
                self._inside[id(chunk)] = min(max(int(done), 0), chunk.n)

    def settle(self, case_id: str) -> None:
        """A case is decided before its last expected chunk: its engines count only what was collected."""
        with self._lock:
            for (_, cid), rows in self._rows.items():
                if cid == case_id:
                    rows.total = rows.done

    def beat(self) -> None:
        """A "still sampling" line for each case with a chunk running and no line for :data:`LINE_INTERVAL_S`."""
        with self._lock:
            now = self._clock()
            for chunk, since in sorted(self._running.values(), key=lambda cs: cs[1]):
                case_id = chunk.case.case_id
                if now - since < LINE_INTERVAL_S or not self._may_print(case_id, now):
                    continue
                inside = self._inside.get(id(chunk))
                if inside:  # the engine reports its rows: the chunk's own pace
                    text = (f"still sampling {chunk.role} slice {chunk.slice_index}: {inside}/{chunk.n} rows, "
                            f"{duration(now - since)} on it, about "
                            f"{duration((chunk.n - inside) * (now - since) / inside)} left")
                else:
                    text = (f"still sampling {chunk.role} slice {chunk.slice_index} ({chunk.n} rows), "
                            f"{duration(now - since)} on it")
                    pace = self._group(chunk).pace()
                    if pace:
                        text += f", about {duration(max(0.0, chunk.n / pace - (now - since)))} left at this engine's pace"
                self._case_line(case_id, now, running=text)

    def _beat(self) -> None:
        while not self._stop.wait(1.0):
            self.beat()


def make_progress(enabled: bool, chunks: Sequence[ChunkLike], done: Sequence[ChunkLike]) -> Progress:
    """A bar on a terminal, plain lines on stderr otherwise, nothing when ``enabled`` is False."""
    if not enabled:
        return NoProgress()
    from rich.console import Console

    console = Console(stderr=True)
    if console.is_terminal:
        return BarProgress(chunks, done, console)
    return LineProgress(chunks, done, sys.stderr)
