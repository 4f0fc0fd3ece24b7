"""A fake engine that hangs on one call (for the chunk timeout and Ctrl-C tests).

``HangingEngine(hang_on_call=k, hang_s=S, marker=PATH, sigint=True)``: call k writes ``marker``
(when given), sends SIGINT to its own process (when ``sigint``: a user's Ctrl-C while it hangs),
then blocks for ``hang_s`` seconds (a bound, so that a test of old code fails instead of hanging
forever) or until :func:`release_all` is called, and samples as ``FakeEngine`` afterwards.
Usable as the spec ``hanging_engine:HangingEngine`` with this folder on ``sys.path``.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

from fake_engines import FakeEngine

from speceq.engines.base import SampleBatch, SampleRequest

_RELEASE = threading.Event()


def release_all() -> None:
    """Let every hanging call of this process return (test teardown)."""
    _RELEASE.set()


def arm() -> None:
    _RELEASE.clear()


class HangingEngine(FakeEngine):
    def __init__(self, *, hang_on_call: int = 1, hang_s: float = 60.0, marker: str | None = None,
                 sigint: bool = False, name: str = "hanging") -> None:
        super().__init__(name=name)
        self.hang_on_call = int(hang_on_call)
        self.hang_s = float(hang_s)
        self.marker = marker
        self.sigint = bool(sigint) if not isinstance(sigint, str) else sigint.lower() == "true"

    def sample(self, request: SampleRequest) -> SampleBatch:
        if self.calls + 1 == self.hang_on_call:
            if self.marker:
                Path(self.marker).write_text("hanging\n")
            if self.sigint:
                os.kill(os.getpid(), signal.SIGINT)
            _RELEASE.wait(self.hang_s)
        return super().sample(request)
