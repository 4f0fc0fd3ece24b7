"""Rows done inside one ``sample()`` call: an optional hook engines may call, for progress lines.

A slow engine (one ``generate()`` per row, a remote server) can spend minutes on one chunk;
without news from inside it, a log shows nothing but "still sampling ... 423 s on it". An
engine may call :func:`report_rows` with the rows of the current request it has finished; the
collection's progress line then says ``120/500 rows`` and how long the rest should take (in this
process, and from local worker processes, which pass it on at most once a second; Ray tasks
report whole chunks only). Engines that never call it work exactly as before (progress moves
chunk by chunk), and a call outside a collection does nothing, so an engine can call it
unconditionally.

Example, in an engine's ``sample``::

    from speceq.engines.row_progress import report_rows

    for i, row in enumerate(rows_to_sample):
        ...
        report_rows(i + 1)
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

_local = threading.local()


def report_rows(done: int) -> None:
    """Say that ``done`` rows (a count, of this ``sample()`` call's rows) are finished; a no-op when nobody listens."""
    listener = getattr(_local, "listener", None)
    if listener is not None:
        listener(int(done))


@contextlib.contextmanager
def listen_rows(callback: Callable[[int], None] | None) -> Iterator[None]:
    """While the block runs on this thread, :func:`report_rows` calls go to ``callback`` (None: nowhere)."""
    previous = getattr(_local, "listener", None)
    _local.listener = callback
    try:
        yield
    finally:
        _local.listener = previous


__all__ = ["listen_rows", "report_rows"]
