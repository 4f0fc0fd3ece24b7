"""Small torch helpers shared by the engines, the oracle, the run, the calibration and benchmarks.

Threads, dtype names, per-batch random generators, and the one place that knows how a
Hugging Face causal LM takes its KV cache (``cache=`` in transformers 5.24, which warns
that ``past_key_values=`` is removed in 5.40; older releases only know ``past_key_values``).
"""

from __future__ import annotations

import inspect
import os
from typing import Any

import numpy as np
import torch

from speceq.errors import ConfigError

#: Environment variable that sets torch's intra-op threads for speceq (overrides the default 1).
THREADS_ENV = "SPECEQ_TORCH_THREADS"

_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def configure_threads(n: int | None = None) -> int:
    """Set torch's intra-op thread count and return it.

    ``n`` given: use it. ``None``: use ``$SPECEQ_TORCH_THREADS`` when set, leave torch alone
    when ``$OMP_NUM_THREADS`` is set (the user chose), else 1 thread: on a loaded 2-core
    machine 2 threads were measured up to 7x slower than 1.
    """
    if n is None:
        env = os.environ.get(THREADS_ENV)
        if env is not None:
            try:
                n = int(env)
            except ValueError:
                raise ConfigError(f"expected a positive integer, got {env!r}", where=f"${THREADS_ENV}") from None
        elif os.environ.get("OMP_NUM_THREADS"):
            return torch.get_num_threads()
        else:
            n = 1
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"expected a positive integer, got {n!r}", where="threads")
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """Map a dtype name (``"float32"``, ``"bfloat16"``, ...) to a torch dtype."""
    if isinstance(dtype, torch.dtype):
        return dtype
    try:
        return _DTYPES[str(dtype).lower()]
    except KeyError:
        raise ConfigError(f"unknown dtype {dtype!r}; expected one of {sorted(_DTYPES)}", where="dtype") from None


def derive_seed(seed: int, *keys: int) -> int:
    """A 63-bit seed derived from ``seed`` and ``keys`` (numpy SeedSequence), for independent streams."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError(f"expected a non-negative integer, got {seed!r}", where="seed")
    state = np.random.SeedSequence([int(seed), *(int(k) for k in keys)]).generate_state(2, dtype=np.uint32)
    return (int(state[0]) << 31) ^ int(state[1])


def batch_generator(
    seed: int, batch_index: int, device: str | torch.device = "cpu", *, stream: int = 0
) -> torch.Generator:
    """The torch.Generator of one engine batch, seeded from (seed, batch index, stream).

    Every random draw of a batch comes from it, so a seed reproduces a request exactly, and
    batches draw independent streams.
    """
    gen = torch.Generator(device=device)
    gen.manual_seed(derive_seed(seed, batch_index, stream))
    return gen


def accepts_kwarg(model: Any, name: str) -> bool:
    """Whether ``model.forward`` names the keyword argument ``name`` in its signature."""
    try:
        return name in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def cache_kwarg(model: Any) -> str:
    """Name of the KV-cache argument of ``model.forward``: ``"cache"`` (5.24+) or ``"past_key_values"``."""
    if not accepts_kwarg(model, "cache") and accepts_kwarg(model, "past_key_values"):
        return "past_key_values"
    return "cache"


def first_eos_id(config: Any) -> int | None:
    """The EOS id of a model config (the first one when the config lists several)."""
    eos = getattr(config, "eos_token_id", None)
    if isinstance(eos, (list, tuple)):
        return int(eos[0]) if eos else None
    return None if eos is None else int(eos)
