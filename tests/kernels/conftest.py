"""One torch thread for the kernel tests: small tensor ops are fastest that way on a shared 2-core machine."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="session", autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)
