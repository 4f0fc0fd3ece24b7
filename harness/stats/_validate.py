"""Input checks shared by the ``_<name>_iv()`` validators of the statistics modules.

Each helper raises ``TypeError`` (wrong kind of object) or ``ValueError`` (right kind,
wrong value) and names the offending parameter in backticks, the way scipy does.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np


def as_counts(x: object, name: str) -> np.ndarray:
    """1-D int64 array of non-negative counts (integer-valued floats are accepted)."""
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise ValueError(f"`{name}` must be 1-D, got shape {arr.shape}")
    if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise TypeError(f"`{name}` must hold integer counts, got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.floating):
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise ValueError(f"`{name}` must hold whole numbers")
    if arr.size and arr.min() < 0:
        raise ValueError(f"`{name}` must be non-negative, found {arr.min()} at index {int(np.argmin(arr))}")
    return arr.astype(np.int64, copy=False)


def as_probs(x: object, name: str, *, size: int | None = None, sum_tol: float = 1e-4) -> np.ndarray:
    """1-D float64 probability vector summing to 1 within ``sum_tol``; returned renormalised."""
    arr = np.asarray(x, dtype=np.float64) if _is_numeric(x) else None
    if arr is None:
        raise TypeError(f"`{name}` must be a numeric array")
    if arr.ndim != 1:
        raise ValueError(f"`{name}` must be 1-D, got shape {arr.shape}")
    if size is not None and arr.size != size:
        raise ValueError(f"`{name}` has length {arr.size}, expected {size}")
    if not np.all(np.isfinite(arr)) or (arr.size and arr.min() < 0):
        raise ValueError(f"`{name}` must hold finite non-negative probabilities")
    total = float(arr.sum())
    if abs(total - 1.0) > sum_tol:
        raise ValueError(f"`{name}` sums to {total:.8g}, expected 1 (tolerance {sum_tol:g})")
    return arr / total


def as_real_sample(x: object, name: str, *, min_size: int = 1, context: str = "") -> np.ndarray:
    """1-D float64 array of finite real values with at least ``min_size`` entries.

    context: appended to the messages in parentheses (e.g. which test's scores)."""
    where = f" ({context})" if context else ""
    if not _is_numeric(x):
        raise TypeError(f"`{name}` must be a numeric array{where}")
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"`{name}` must be 1-D, got shape {arr.shape}{where}")
    if arr.size < min_size:
        raise ValueError(f"`{name}` needs at least {min_size} values, got {arr.size}{where}")
    if not np.all(np.isfinite(arr)):
        bad = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise ValueError(f"`{name}` must be finite, found {arr[bad]} at index {bad}{where}")
    return arr


def check_level(value: object, name: str) -> float:
    """A probability level strictly inside (0, 1), e.g. alpha or power."""
    if not isinstance(value, Real) or isinstance(value, bool):
        raise TypeError(f"`{name}` must be a real number, got {type(value).__name__}")
    v = float(value)
    if not (0.0 < v < 1.0):
        raise ValueError(f"`{name}` must lie in (0, 1), got {v}")
    return v


def check_int(value: object, name: str, *, minimum: int) -> int:
    """An integer (not bool) at least ``minimum``."""
    if not isinstance(value, Integral) or isinstance(value, bool):
        raise TypeError(f"`{name}` must be an integer, got {type(value).__name__}")
    v = int(value)
    if v < minimum:
        raise ValueError(f"`{name}` must be >= {minimum}, got {v}")
    return v


def check_positive(value: object, name: str, *, upper: float = math.inf) -> float:
    """A finite real number in (0, upper]."""
    if not isinstance(value, Real) or isinstance(value, bool):
        raise TypeError(f"`{name}` must be a real number, got {type(value).__name__}")
    v = float(value)
    if not (0.0 < v <= upper) or not math.isfinite(v):
        raise ValueError(f"`{name}` must lie in (0, {upper:g}], got {v}")
    return v


def check_rng(rng: object, name: str = "rng") -> np.random.Generator:
    """A numpy ``Generator`` (explicit seeding is the caller's job; no global state)."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"`{name}` must be a numpy.random.Generator, got {type(rng).__name__}")
    return rng


def _is_numeric(x: object) -> bool:
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError):
        return False
    return arr.dtype != bool and (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating))
