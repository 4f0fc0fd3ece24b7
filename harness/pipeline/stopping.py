"""Ctrl-C during sampling: finish and store the chunks being sampled, then stop with a resume hint.

The executors wait at most :data:`~speceq.core.defaults.STOP_GRACE_S` for those chunks, then abandon
them (a hung engine cannot hold the stop up): :mod:`speceq.pipeline.collect.executors`.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import Any

from speceq.core.defaults import STOP_GRACE_S


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during collection: finished chunks are stored; rerunning resumes."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class StopRequest:
    """While active (main thread only), the first SIGINT only asks to stop after the current chunk.

    The handler in place before (Python's default, or SIG_IGN in a background job) is put
    back on exit.
    """

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None
        self._installed = False

    def _handler(self, signum: int, frame: Any) -> None:
        if self.requested:  # second Ctrl-C: stop now
            raise KeyboardInterrupt
        self.requested = True
        sys.stderr.write(f"\nspeceq: stopping after the chunks being sampled are stored (waiting at most "
                         f"{STOP_GRACE_S:g} s for them; Ctrl-C again to stop now)\n")

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handler)
            self._installed = True
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)


def interrupted_message(out_dir: Path, done: int, total: int) -> str:
    """What an interrupted run says: how much is stored and how to resume."""
    return (f"interrupted: {done} of {total} chunks are stored in {out_dir}; run the same command "
            f"again (with the same --out, without --fresh) to resume where it stopped")


__all__ = ["RunInterrupted", "StopRequest", "interrupted_message"]
