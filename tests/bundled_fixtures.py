"""Fixtures for tests of the bundled models (tests/models, tests/tools): offline, one thread, models loaded once.

A folder's ``conftest.py`` imports them (``from bundled_fixtures import draft, offline, target``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from speceq.models import load_draft, load_target


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No test of the folder may reach a model hub."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    yield


@pytest.fixture(scope="session")
def target() -> torch.nn.Module:
    torch.set_num_threads(1)
    return load_target()


@pytest.fixture(scope="session")
def draft() -> torch.nn.Module:
    torch.set_num_threads(1)
    return load_draft()
