"""Ctrl-C or SIGTERM during sampling: keep every stored chunk, stop the workers, say how to resume.

The first Ctrl-C finishes and stores the chunks being sampled, then stops; the executors wait at most
:data:`~speceq.core.defaults.STOP_GRACE_S` for those chunks, then abandon them (a hung engine cannot
hold the stop up): :mod:`speceq.pipeline.collect.executors`. SIGTERM (a CI job cancelled or past its
time limit, ``kill``) stops at once, as a second Ctrl-C does: the chunks being sampled are abandoned and
their worker processes terminated, since whoever sent it may send SIGKILL seconds later. Either way
the exit status is 128 + the signal's number (130, 143), as shells report it.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import Any

from speceq.core.defaults import STOP_GRACE_S


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM during collection: finished chunks are stored; rerunning resumes.

    exit_code: 128 + the signal's number (130 for Ctrl-C, 143 for SIGTERM).
    """

    def __init__(self, message: str, *, signum: int = signal.SIGINT) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = 128 + int(signum)


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived while sampling: stop now (raised in the main thread by :class:`StopRequest`)."""


class StopRequest:
    """While active (main thread only), the first SIGINT only asks to stop after the current chunk;
    SIGTERM stops now (raises :class:`Terminated`). ``signum``: the signal that asked to stop.

    The handlers in place before (Python's default, or SIG_IGN in a background job) are put
    back on exit.
    """

    def __init__(self) -> None:
        self.requested = False
        self.signum: int = signal.SIGINT
        self._previous: Any = None
        self._previous_term: Any = None
        self._installed = False

    def _terminate(self, signum: int, frame: Any) -> None:
        self.requested, self.signum = True, signal.SIGTERM
        sys.stderr.write("\nspeceq: SIGTERM: stopping now (the chunks being sampled are abandoned; stored chunks "
                         "are kept)\n")
        raise Terminated

    def _handler(self, signum: int, frame: Any) -> None:
        if self.requested:  # second Ctrl-C: stop now
            raise KeyboardInterrupt
        self.requested = True
        sys.stderr.write(f"\nspeceq: stopping after the chunks being sampled are stored (waiting at most "
                         f"{STOP_GRACE_S:g} s for them; Ctrl-C again to stop now)\n")

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handler)
            self._previous_term = signal.signal(signal.SIGTERM, self._terminate)
            self._installed = True
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            signal.signal(signal.SIGTERM, self._previous_term)


def interrupted_message(out_dir: Path, done: int, total: int) -> str:
    """What an interrupted run says: how much is stored and how to resume."""
    return (f"interrupted: {done} of {total} chunks are stored in {out_dir}; run the same command "
            f"again (with the same --out, without --fresh) to resume where it stopped")


__all__ = ["RunInterrupted", "StopRequest", "Terminated", "interrupted_message"]
