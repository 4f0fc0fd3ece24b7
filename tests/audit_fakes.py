"""Fake engines for the audit tests (no torch): ``fake_engines.FakeEngine`` with a batch limit,
or one that fails at construction. Usable as ``"audit_fakes:<Name>"`` engine specs."""

from __future__ import annotations

from typing import Any

from fake_engines import FakeEngine

ROW_LIMIT_MESSAGE = "this fake runs one row per batch only (as transformers' assisted generation)"


class OneRowFake(FakeEngine):
    """FakeEngine that declares a batch-size limit of 1, as the row-loop transformers engines do."""

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "batch_size_limit": 1, "limitation": ROW_LIMIT_MESSAGE}


class MissingPathFake(FakeEngine):
    """An engine whose library lacks the path: its constructor raises ImportError."""

    def __init__(self, **kw: Any) -> None:
        raise ImportError("cannot import name 'NoSuchGenerator' from 'transformers.generation'\nsecond line")


class LossyFake(FakeEngine):
    """FakeEngine that declares itself lossy by design (``describe()["lossless"] is False``)."""

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "lossless": False}


class MinPFake(FakeEngine):
    """FakeEngine that declares min_p in the hf order (its rows ignore it: enough for the audit's plumbing, which
    never scores them against a law)."""

    sampling_fields = {"min_p": ("hf",)}
