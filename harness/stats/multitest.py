"""Multiple testing: Holm adjusted p-values (FWER) and Benjamini-Hochberg q-values (FDR).

Holm (Scand. J. Stat. 1979) controls the family-wise error under any dependence, which is
why it decides the run; with weights (Holm's weighted form) a hypothesis of weight w_i is
tested first at alpha w_i / sum(w), so a family can give some of its tests a larger share of
alpha without losing that control; BH (1995) controls the false discovery rate under independence or
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


def _holm_iv(pvalues: object, weights: object) -> tuple[np.ndarray, np.ndarray | None]:
    p = _pvalues_iv(pvalues)
    if weights is None:
        return p, None
    try:
        w = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"`weights` must be a sequence of numbers: {exc}") from exc
    if w.shape != p.shape:
        raise ValueError(f"`weights` must have the shape of `pvalues` {p.shape}, got {w.shape}")
    bad = ~(np.isfinite(w) & (w > 0.0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"`weights` must be finite and > 0, found {w[i]} at index {i}")
    return p, w


def holm(pvalues: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Holm step-down adjusted p-values in input order.

    Unweighted: max over j <= i of min(1, (m - j + 1) p_(j)). With ``weights`` (> 0, any
    scale), Holm's weighted form: order by p_i / w_i, and p~_(i) = max over j <= i of
    min(1, p_(j) W_j / w_(j)), W_j the weight of the hypotheses not yet rejected at step j;
    rejecting p~ <= alpha tests H_i first at alpha w_i / sum(w) and controls the family-wise
    error at alpha under any dependence. Equal weights give the unweighted values.
    """
    p, w = _holm_iv(pvalues, weights)
    m = p.size
    if m == 0:
        return p.copy()
    if w is None:
        order = np.argsort(p, kind="stable")
        stepped = np.minimum(1.0, (m - np.arange(m)) * p[order])
    else:
        order = np.argsort(p / w, kind="stable")
        remaining = np.cumsum(w[order][::-1])[::-1]
        stepped = np.minimum(1.0, p[order] * (remaining / w[order]))  # the factor is >= 1 exactly
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
