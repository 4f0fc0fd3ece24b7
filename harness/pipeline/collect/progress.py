"""Collection progress: a rich bar on a terminal, plain lines elsewhere (CI logs), or nothing.

Outside a terminal a line is printed per case and engine when its share of finished chunks
has grown by at least 10 % since its last line, or 30 s have passed; while a chunk is being
sampled and nothing else was printed for 30 s, a "still sampling" line says what runs, so
a CI log is never silent for long.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TextIO

#: Plain lines: a new line per case and engine after this share of its chunks ...
LINE_STEP = 0.10
#: ... or after this many seconds.
LINE_INTERVAL_S = 30.0


class ChunkLike(Protocol):
    role: str
    slice_index: int

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


class BarProgress:
    """The rich progress bar over every chunk of the run (terminals only)."""

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
        self._total = len(chunks)
        self._task = self._bar.add_task("collecting", total=self._total, completed=len(done))
        self._open = Counter(c.case.case_id for c in chunks)  # case id -> expected chunks not yet collected
        self._open.subtract(c.case.case_id for c in done)

    def __enter__(self) -> BarProgress:
        self._bar.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._bar.__exit__(*exc)

    def started(self, chunk: ChunkLike) -> None:
        self._bar.update(self._task, description=chunk.label())

    def finished(self, chunk: ChunkLike) -> None:
        self._open[chunk.case.case_id] -= 1
        self._bar.advance(self._task)

    def reused(self, chunk: ChunkLike) -> None:
        self.finished(chunk)

    def settle(self, case_id: str) -> None:
        self._total -= max(0, self._open.pop(case_id, 0))
        self._bar.update(self._task, total=self._total)


class LineProgress:
    """Plain progress lines for logs (see the module docstring)."""

    def __init__(self, chunks: Sequence[ChunkLike], done: Sequence[ChunkLike], stream: TextIO,
                 clock: Callable[[], float] = time.monotonic, heartbeat: bool = True) -> None:
        self._total = Counter(_group(c) for c in chunks)
        self._done = Counter(_group(c) for c in done)
        self._stream = stream
        self._clock = clock
        self._t0 = clock()
        self._last_line: dict[tuple[str, str], tuple[float, float]] = {}  # group -> (time, share)
        self._last_any = self._t0
        self._running: dict[str, float] = {}  # chunk label -> start time
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True) if heartbeat else None

    def __enter__(self) -> LineProgress:
        if self._thread is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    def _print(self, text: str) -> None:
        self._last_any = self._clock()
        print(f"speceq: {text}", file=self._stream, flush=True)

    def started(self, chunk: ChunkLike) -> None:
        with self._lock:
            self._running[chunk.label()] = self._clock()

    def finished(self, chunk: ChunkLike) -> None:
        group = _group(chunk)
        with self._lock:
            self._running.pop(chunk.label(), None)
            self._done[group] += 1
            now, share = self._clock(), self._done[group] / self._total[group]
            last_t, last_share = self._last_line.get(group, (self._t0, 0.0))
            if share >= 1.0 or share - last_share >= LINE_STEP - 1e-9 or now - last_t >= LINE_INTERVAL_S:
                self._last_line[group] = (now, share)
                role, case_id = group
                self._print(f"{role} · {case_id}: {self._done[group]}/{self._total[group]} chunks "
                            f"({100 * share:.0f} %), {now - self._t0:.0f} s")

    def reused(self, chunk: ChunkLike) -> None:
        """A chunk found in the store: counted as done, no line."""
        with self._lock:
            self._done[_group(chunk)] += 1

    def settle(self, case_id: str) -> None:
        """A case is decided before its last expected chunk: its groups count only what was collected."""
        with self._lock:
            for group in [g for g in self._total if g[1] == case_id]:
                self._total[group] = self._done[group]

    def beat(self) -> None:
        """Print a "still sampling" line when nothing was printed for :data:`LINE_INTERVAL_S`."""
        with self._lock:
            now = self._clock()
            if self._running and now - self._last_any >= LINE_INTERVAL_S:
                label, since = min(self._running.items(), key=lambda kv: kv[1])
                more = f" (+{len(self._running) - 1} more)" if len(self._running) > 1 else ""
                self._print(f"still sampling {label}{more}, {now - since:.0f} s on it, {now - self._t0:.0f} s in all")

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
