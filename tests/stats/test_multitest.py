"""Holm and Benjamini-Hochberg adjustments."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from speceq.stats import benjamini_hochberg, holm

pvals = st.lists(st.floats(0.0, 1.0), min_size=1, max_size=30)


def _holm_by_hand(p: list[float]) -> list[float]:
    """Holm's definition, written independently: step-down over sorted p, running max."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def test_holm_known_values() -> None:
    assert holm([0.01, 0.04, 0.03]).tolist() == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.9]).tolist() == pytest.approx([1.0, 1.0])


@settings(max_examples=100, deadline=None, derandomize=True)
@given(pvals)
def test_holm_matches_definition_monotone_at_least_raw(p: list[float]) -> None:
    adj = holm(np.array(p))
    assert adj.tolist() == pytest.approx(_holm_by_hand(p))
    assert np.all(adj >= np.array(p)) and np.all(adj <= 1.0)
    order = np.argsort(p, kind="stable")
    assert np.all(np.diff(adj[order]) >= 0)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(pvals)
def test_bh_matches_scipy_monotone_at_least_raw(p: list[float]) -> None:
    q = benjamini_hochberg(np.array(p))
    assert q == pytest.approx(stats.false_discovery_control(np.array(p), method="bh"), abs=1e-12)
    assert np.all(q >= np.array(p) - 1e-15) and np.all(q <= 1.0)
    assert np.all(q <= holm(np.array(p)) + 1e-15)
    order = np.argsort(p, kind="stable")
    assert np.all(np.diff(q[order]) >= -1e-15)


def test_empty_and_invalid() -> None:
    assert holm([]).size == 0 and benjamini_hochberg([]).size == 0
    with pytest.raises(ValueError, match="`pvalues`"):
        holm([0.1, float("nan")])
    with pytest.raises(ValueError, match="`pvalues`"):
        benjamini_hochberg([1.2])
