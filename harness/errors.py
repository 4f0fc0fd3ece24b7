"""Exception classes. Each carries the context a user needs to fix the problem."""

from __future__ import annotations


class SpeceqError(Exception):
    """Base class of every error speceq raises on purpose."""


class ConfigError(SpeceqError, ValueError):
    """A case, parameter or option is invalid.

    ``where`` names the place (file, case id, field) and is prefixed to the message.
    """

    def __init__(self, message: str, *, where: str | None = None) -> None:
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)


class EngineError(SpeceqError):
    """An engine failed or returned output that breaks the engine contract."""

    def __init__(self, message: str, *, engine: str | None = None, case_id: str | None = None) -> None:
        self.engine = engine
        self.case_id = case_id
        ctx = ", ".join(x for x in (f"engine {engine!r}" if engine else "", f"case {case_id!r}" if case_id else "") if x)
        super().__init__(f"{ctx}: {message}" if ctx else message)


class EngineNotFound(SpeceqError, LookupError):
    """An engine name, ``module:attr`` or ``file.py:attr`` string could not be resolved."""


class StoreError(SpeceqError):
    """The sample store is unreadable, or holds samples of a different configuration."""


class DistributionMismatch(SpeceqError, AssertionError):
    """Raised by the pytest face when a case is ``shifted``; carries the verdict."""

    def __init__(self, message: str, verdict: object | None = None) -> None:
        self.verdict = verdict
        super().__init__(message)


class MissingExtra(SpeceqError, ImportError):
    """An optional feature needs packages of one of speceq's extras that are not installed."""

    def __init__(self, extra: str, missing: list[str], *, purpose: str) -> None:
        self.extra = extra
        self.missing = list(missing)
        super().__init__(
            f"{purpose} needs the package(s) {', '.join(missing)}: install them with pip install 'speceq[{extra}]'"
        )
