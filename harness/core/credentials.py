"""Credentials out of everything speceq writes or prints: one helper for every writer.

A server URL may carry a secret (``http://user:KEY@host/v1``, ``...?api_key=KEY``) and an engine
may take one as an option (``api_key=KEY``). Provenance, results, chunk identities and error lines
go through :func:`redact` (JSON-like documents) or :func:`redact_text` (free text), which put
:data:`MASK` in place of the secret and keep everything else, so a redacted document still says
which server and which option were used.
"""

from __future__ import annotations

import re
from typing import Any

#: What a secret is replaced with.
MASK = "***"

#: Option and field names whose string values are secrets (compared lower-case, ``-`` read as ``_``).
SECRET_KEYS: frozenset[str] = frozenset({
    "api_key", "apikey", "x_api_key", "password", "passwd", "secret", "client_secret", "access_token",
    "auth_token", "authorization", "bearer_token",
})

_SECRET_NAME = r"(?:x[_-]?)?api[_-]?key|apikey|password|passwd|client[_-]?secret|secret|access[_-]?token|auth[_-]?token"
#: ``scheme://userinfo@``: the user and password of a URL.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/\s@'\"<>]+)@")
#: ``?api_key=KEY`` / ``&token=KEY`` in a URL's query string.
_QUERY = re.compile(rf"(?P<head>[?&;](?:{_SECRET_NAME}|key|token|sig|signature)=)(?P<value>[^&#\s'\"<>]+)",
                    re.IGNORECASE)
#: ``api_key=KEY``, ``api_key: KEY``, ``'api_key': 'KEY'`` in free text (not ``api_key_env``).
_ASSIGNED = re.compile(rf"(?P<head>(?<![\w-])(?:{_SECRET_NAME})['\"]?\s*[:=]\s*['\"]?)(?P<value>[^\s'\",}}&]+)",
                       re.IGNORECASE)
_BEARER = re.compile(r"(?P<head>\bBearer\s+)(?P<value>[A-Za-z0-9._~+/=-]+)")


def redact_url(text: str) -> str:
    """``text`` with the userinfo and the secret query parameters of every URL in it masked."""
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", text)
    return _QUERY.sub(lambda m: f"{m['head']}{MASK}", text)


def redact_text(text: str) -> str:
    """Free text (an error line, a log line) with URL credentials, ``api_key=...`` and bearer tokens masked."""
    text = redact_url(str(text))
    text = _ASSIGNED.sub(lambda m: f"{m['head']}{MASK}", text)
    return _BEARER.sub(lambda m: f"{m['head']}{MASK}", text)


def is_secret_key(key: Any) -> bool:
    """Whether a field or option name holds a secret (``api_key``, ``password``, ...; not ``api_key_env``)."""
    return isinstance(key, str) and key.strip().lower().replace("-", "_") in SECRET_KEYS


def redact(obj: Any) -> Any:
    """A copy of a JSON-like document with secrets masked: the string value of every secret-named key,
    and the credentials of every URL in a string. Other values are returned as they are (a case's
    prompt text is not rewritten, only URLs in it)."""
    if isinstance(obj, str):
        return redact_url(obj)
    if isinstance(obj, dict):
        return {k: (MASK if is_secret_key(k) and isinstance(v, str) and v else redact(v)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [redact(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(redact(v) for v in obj)
    return obj


__all__ = ["MASK", "SECRET_KEYS", "is_secret_key", "redact", "redact_text", "redact_url"]
