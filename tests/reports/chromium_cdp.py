"""A minimal headless-Chromium driver over the DevTools protocol on a pipe (test helper).

Why not playwright or selenium: Debian's ``chromium`` already speaks the Chrome DevTools
Protocol (CDP) on file descriptors 3 (commands in) and 4 (events out) when started with
``--remote-debugging-pipe``; a hundred lines of subprocess + JSON give us exactly what the
report tests need (console messages, uncaught exceptions, every network request, a script
evaluation and a screenshot) with no extra Python package and no browser download.

Messages are JSON objects terminated by a NUL byte. Commands carry an ``id``; replies echo it.
Events of an attached page carry its ``sessionId`` (flat session mode).
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")

#: Launch flags required by the project (no network side channels, no first-run UI).
LAUNCH_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-pipe",
)


class CDPError(RuntimeError):
    """Chromium failed to start, answered a command with an error, or timed out."""


@dataclass
class PageLog:
    """What a loaded page did: console messages, exceptions, log entries, requested URLs."""

    console: list[dict[str, Any]] = field(default_factory=list)
    exceptions: list[dict[str, Any]] = field(default_factory=list)
    log_entries: list[dict[str, Any]] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    def errors(self) -> list[str]:
        """Every console error/warning, uncaught exception and error/warning log entry, as text."""
        out = []
        for c in self.console:
            if c.get("type") in ("error", "warning", "assert"):
                out.append(f"console.{c.get('type')}: {[a.get('value', a.get('description')) for a in c.get('args', [])]}")
        for e in self.exceptions:
            out.append(f"exception: {e.get('exceptionDetails', {}).get('text')} {e.get('exceptionDetails', {}).get('exception', {}).get('description')}")
        for entry in self.log_entries:
            if entry.get("level") in ("error", "warning"):
                out.append(f"log {entry.get('source')}/{entry.get('level')}: {entry.get('text')} {entry.get('url', '')}")
        return out


class Chromium:
    """One headless Chromium process driven over the DevTools pipe; use as a context manager."""

    def __init__(self, executable: Path = CHROMIUM, timeout_s: float = 60.0) -> None:
        self.timeout_s = timeout_s
        self._profile = tempfile.TemporaryDirectory(prefix="speceq-chromium-")
        cmd_r, self._cmd_w = os.pipe()  # we write commands, Chromium reads fd 3
        self._evt_r, evt_w = os.pipe()  # Chromium writes fd 4, we read

        def _place_pipes() -> None:  # runs in the child before exec
            a = fcntl.fcntl(cmd_r, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(evt_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)  # dup2 clears close-on-exec: 3 and 4 survive exec
            os.dup2(b, 4)

        args = [str(executable), *LAUNCH_FLAGS, f"--user-data-dir={self._profile.name}", "about:blank"]
        self._proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            close_fds=False, preexec_fn=_place_pipes,
        )
        os.close(cmd_r)
        os.close(evt_w)
        self._buf = b""
        self._next_id = 0
        self._events: list[dict[str, Any]] = []

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Ask Chromium to quit, wait, then kill it if it lingers; remove the profile."""
        if self._proc.poll() is None:
            try:
                self._send("Browser.close", {}, None)
                self._proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait(timeout=10)
        for fd in (self._cmd_w, self._evt_r):
            try:
                os.close(fd)
            except OSError:
                pass
        self._profile.cleanup()

    # ---- protocol --------------------------------------------------------------------------
    def _send(self, method: str, params: dict[str, Any], session: str | None) -> int:
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        return self._next_id

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CDPError("timed out waiting for Chromium")
            ready, _, _ = select.select([self._evt_r], [], [], left)
            if ready:
                chunk = os.read(self._evt_r, 1 << 20)
                if not chunk:
                    raise CDPError(f"Chromium closed the DevTools pipe (exit code {self._proc.poll()})")
                self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        """Send one command and return its result; events that arrive meanwhile are kept."""
        want = self._send(method, params or {}, session)
        deadline = time.monotonic() + self.timeout_s
        while True:
            msg = self._read_message(deadline)
            if msg.get("id") == want:
                if "error" in msg:
                    raise CDPError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self._events.append(msg)

    def wait_event(self, method: str, session: str, timeout_s: float | None = None) -> dict[str, Any]:
        """Return the params of the first (kept or future) event ``method`` of ``session``."""
        for i, e in enumerate(self._events):
            if e.get("method") == method and e.get("sessionId") == session:
                return self._events.pop(i)["params"]
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        while True:
            msg = self._read_message(deadline)
            if msg.get("method") == method and msg.get("sessionId") == session:
                return msg["params"]
            self._events.append(msg)

    # ---- what the tests use ----------------------------------------------------------------
    def load(self, path: Path, width: int = 1280, height: int = 900) -> LoadedPage:
        """Open ``path`` in a fresh tab with logging on; return once the load event has fired."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", {}, session)
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session)
        self._events.clear()
        self.call("Page.navigate", {"url": path.resolve().as_uri()}, session)
        self.wait_event("Page.loadEventFired", session)
        # Let late console messages arrive: an evaluation round-trip after the load event.
        self.call("Runtime.evaluate", {"expression": "0"}, session)
        return LoadedPage(self, session)

    def drain(self, session: str) -> PageLog:
        """Sort the kept events of ``session`` into a PageLog."""
        log = PageLog()
        for e in self._events:
            if e.get("sessionId") != session:
                continue
            method, params = e.get("method"), e.get("params", {})
            if method == "Runtime.consoleAPICalled":
                log.console.append(params)
            elif method == "Runtime.exceptionThrown":
                log.exceptions.append(params)
            elif method == "Log.entryAdded":
                log.log_entries.append(params.get("entry", {}))
            elif method == "Network.requestWillBeSent":
                log.requests.append(params.get("request", {}).get("url", ""))
        return log


@dataclass
class LoadedPage:
    browser: Chromium
    session: str

    def evaluate(self, expression: str) -> Any:
        """Value of a JavaScript expression in the page (JSON-serialisable values only)."""
        r = self.browser.call("Runtime.evaluate", {"expression": expression, "returnByValue": True}, self.session)
        if "exceptionDetails" in r:
            raise CDPError(f"evaluating {expression!r}: {r['exceptionDetails'].get('text')}")
        return r["result"].get("value")

    def screenshot_element(self, selector: str) -> bytes:
        """A PNG of the first element matching ``selector`` (its whole box, scrolled or not)."""
        box = self.evaluate(
            f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
            " return [r.left + window.scrollX, r.top + window.scrollY, r.width, r.height]; })()")
        return self.screenshot_clip(*box)

    def screenshot_clip(self, x: float, y: float, width: float, height: float) -> bytes:
        """A PNG of one rectangle of the page (CSS pixels from the page's top left)."""
        r = self.browser.call("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": x, "y": y, "width": width, "height": height, "scale": 1}}, self.session)
        return base64.b64decode(r["data"])

    def screenshot(self) -> bytes:
        """PNG of the whole page (beyond the viewport)."""
        r = self.browser.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}, self.session)
        return base64.b64decode(r["data"])

    def log(self) -> PageLog:
        return self.browser.drain(self.session)
