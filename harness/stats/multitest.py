"""Multiple testing: Holm adjusted p-values (FWER) and Benjamini-Hochberg q-values (FDR).

Holm (Scand. J. Stat. 1979) controls the family-wise error under any dependence, which is
why it decides the run; BH (1995) controls the false discovery rate under independence or
positive dependence and is reported as a diagnostic. Both return values in the input order,
capped at 1, and monotone in the raw p-values.
"""

from __future__ import annotations

import numpy as np


def _pvalues_iv(pvalues: object) -> np.ndarray:
    try:
        p = np.asarray(pvalues, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"`pvalues` must be a sequence of numbers: {exc}") from exc
    if p.ndim != 1:
        raise ValueError(f"`pvalues` must be 1-D, got shape {p.shape}")
    bad = ~((p >= 0.0) & (p <= 1.0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"`pvalues` must lie in [0, 1], found {p[i]} at index {i}")
    return p


def _holm_iv(pvalues: object) -> np.ndarray:
    return _pvalues_iv(pvalues)


def holm(pvalues: np.ndarray) -> np.ndarray:
    """Holm step-down adjusted p-values: max over j <= i of min(1, (m - j + 1) p_(j)), input order."""
    p = _holm_iv(pvalues)
    m = p.size
    if m == 0:
        return p.copy()
    order = np.argsort(p, kind="stable")
    stepped = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adjusted = np.empty(m)
    adjusted[order] = np.maximum.accumulate(stepped)
    return adjusted


def _benjamini_hochberg_iv(pvalues: object) -> np.ndarray:
    return _pvalues_iv(pvalues)


def benjamini_hochberg(pvalues: np.ndarray) -> np.ndarray:
    """BH q-values: min over j >= i of min(1, m p_(j) / j), in input order."""
    p = _benjamini_hochberg_iv(pvalues)
    m = p.size
    if m == 0:
        return p.copy()
    order = np.argsort(p, kind="stable")
    stepped = np.minimum(1.0, m * p[order] / np.arange(1, m + 1))
    q = np.empty(m)
    q[order] = np.minimum.accumulate(stepped[::-1])[::-1]
    return q
