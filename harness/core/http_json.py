"""Minimal JSON-over-HTTP for the OpenAI-compatible engine, on the standard library.

``urllib.request`` + ``http.client`` are enough for a loopback or LAN inference server, add no
dependency, and raise distinct exceptions for each failure we must tell apart: an HTTP status
(:class:`urllib.error.HTTPError`), a timeout (:class:`TimeoutError`), a dropped connection
(:class:`http.client.RemoteDisconnected`, :class:`ConnectionError`, ``IncompleteRead``). Each
failure is mapped to a :class:`TransportFault` whose ``kind`` names it and ``retriable`` says
whether trying again can help.
"""

from __future__ import annotations

import http.client
import json
import socket
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

#: HTTP statuses worth retrying: overload, gateway trouble, request timeout, rate limit.
RETRIABLE_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


class TransportFault(Exception):
    """One failed HTTP exchange. ``kind``: http_5xx, http_4xx, timeout, connection, bad_json."""

    def __init__(self, kind: str, detail: str, *, retriable: bool, status: int | None = None) -> None:
        self.kind = kind
        self.detail = detail
        self.retriable = retriable
        self.status = status
        super().__init__(f"{kind}: {detail}")


_LOOPBACK = ("127.", "localhost", "[::1]")
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
_DEFAULT = urllib.request.build_opener()


def _open(req: urllib.request.Request, timeout_s: float) -> Any:
    """Open ``req``; loopback servers are reached directly, never through an HTTP(S)_PROXY."""
    host = urllib.parse.urlsplit(req.full_url).netloc.rsplit("@", 1)[-1]
    opener = _DIRECT if host.startswith(_LOOPBACK) else _DEFAULT
    return opener.open(req, timeout=timeout_s)


def _short(body: bytes, limit: int = 300) -> str:
    text = body.decode("utf-8", errors="replace").strip()
    return text if len(text) <= limit else text[:limit] + "..."


def request_json(
    url: str, *, body: dict[str, Any] | None, headers: dict[str, str], timeout_s: float
) -> Any:
    """POST ``body`` (or GET when None) and return the decoded JSON reply; raise TransportFault."""
    data = None if body is None else json.dumps(body).encode("utf-8")
    req = urllib.request.Request(
        url, data=data, method="GET" if body is None else "POST",
        headers={"Content-Type": "application/json", "Accept": "application/json", **headers},
    )
    try:
        with _open(req, timeout_s) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as exc:
        status = int(exc.code)
        try:
            detail = _short(exc.read())
        except (OSError, http.client.HTTPException):
            detail = ""
        kind = "http_5xx" if status >= 500 else "http_4xx"
        message = f"HTTP {status} {detail}".strip()
        raise TransportFault(kind, message, retriable=status in RETRIABLE_STATUS, status=status) from None
    except TimeoutError as exc:
        raise TransportFault("timeout", f"no answer within {timeout_s:g} s ({exc})", retriable=True) from None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, (TimeoutError, socket.timeout)):
            raise TransportFault("timeout", f"no answer within {timeout_s:g} s", retriable=True) from None
        raise TransportFault("connection", f"cannot reach the server ({exc.reason})", retriable=True) from None
    except (http.client.HTTPException, ConnectionError) as exc:
        raise TransportFault("connection", f"connection dropped ({type(exc).__name__}: {exc})", retriable=True) from None
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise TransportFault("bad_json", f"unparseable JSON ({reason}): {_short(raw, 120)!r}", retriable=True) from None


def get_text(url: str, *, headers: dict[str, str], timeout_s: float) -> str:
    """GET a text resource (e.g. Prometheus ``/metrics``); raise TransportFault."""
    req = urllib.request.Request(url, method="GET", headers=headers)
    try:
        with _open(req, timeout_s) as resp:
            return resp.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as exc:
        kind = "http_4xx" if exc.code < 500 else "http_5xx"
        raise TransportFault(kind, f"HTTP {exc.code}", retriable=False, status=exc.code) from None
    except (TimeoutError, urllib.error.URLError, http.client.HTTPException, ConnectionError) as exc:
        raise TransportFault("connection", f"{type(exc).__name__}: {exc}", retriable=False) from None


def parse_prometheus(text: str) -> dict[str, float]:
    """Sum Prometheus samples by metric name (labels dropped); comments and bad lines skipped."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name = head.split("{", 1)[0].strip()
        try:
            out[name] = out.get(name, 0.0) + float(value)
        except ValueError:
            continue
    return out
