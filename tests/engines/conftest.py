"""Tiny random-init Llama models for the engine tests (the bundled models are not needed).

``target``: 2 layers, hidden 32, peaky next-token laws (entropy ~3 nats).
``close_draft``: the target with noise on its weights (acceptance ~0.3-0.5 at k=3).
``far_draft``: an independent 1-layer model (acceptance ~0.05: rejections everywhere).
``fast_target`` / ``fast_draft``: 1-layer target and a noisy copy (rejection rate ~0.45 at
the first position), for the sampling-heavy empirical checks.
``eos_id``: a token the target emits often, used as EOS so that rows end early.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch

from speceq.models.hf_utils import tiny_random_llama

#: Prompts of different lengths (7, 1, 3 tokens) that share each batch.
MIXED_PROMPTS = ((5, 17, 99, 3, 42, 8, 120), (7,), (200, 31, 64))


@pytest.fixture(scope="session")
def mixed_prompts() -> tuple[tuple[int, ...], ...]:
    return MIXED_PROMPTS


@pytest.fixture(scope="session", autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def target() -> torch.nn.Module:
    return tiny_random_llama(0, init_std=0.5)


def _noisy_copy(model: torch.nn.Module, relative_noise: float, seed: int = 5) -> torch.nn.Module:
    """``model`` with Gaussian noise of ``relative_noise`` x each tensor's std on every weight."""
    copied = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in copied.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * relative_noise * p.std())
    return copied


@pytest.fixture(scope="session")
def noisy_copy() -> Callable[..., torch.nn.Module]:
    """The noisy-copy builder, for tests that make a draft of their own target (a conftest is not importable
    by name: pytest may have loaded another ``conftest`` module first)."""
    return _noisy_copy


@pytest.fixture(scope="session")
def close_draft(target: torch.nn.Module) -> torch.nn.Module:
    return _noisy_copy(target, 0.05)


@pytest.fixture(scope="session")
def fast_target() -> torch.nn.Module:
    return tiny_random_llama(2, init_std=0.5, layers=1)


@pytest.fixture(scope="session")
def fast_draft(fast_target: torch.nn.Module) -> torch.nn.Module:
    return _noisy_copy(fast_target, 0.2)


@pytest.fixture(scope="session")
def far_draft() -> torch.nn.Module:
    return tiny_random_llama(1, init_std=0.5, layers=1)


@pytest.fixture(scope="session")
def eos_id(target: torch.nn.Module) -> int:
    """The token with the largest mean next-token probability over a few random prefixes."""
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 256, (32, 6), generator=gen)
    with torch.inference_mode():
        probs = torch.softmax(target(input_ids=ids).logits, dim=-1).mean(dim=(0, 1))
    return int(probs[:256].argmax())
