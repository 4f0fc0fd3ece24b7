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


def _weighted_holm_rejects(p: list[float], w: list[float], alpha: float) -> set[int]:
    """Holm's weighted step-down, written as the procedure: reject while some remaining p_i <= alpha w_i / W."""
    left, out = set(range(len(p))), set()
    while left:
        total = sum(w[i] for i in left)
        hit = [i for i in left if p[i] <= alpha * w[i] / total]
        if not hit:
            break
        i = min(hit, key=lambda j: (p[j] / w[j], j))
        out.add(i)
        left.remove(i)
    return out


weighted = st.lists(st.tuples(st.floats(0.0, 1.0), st.floats(0.01, 100.0)), min_size=1, max_size=20)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(weighted, st.sampled_from([1e-3, 0.01, 0.05, 0.2]))
def test_weighted_holm_rejects_what_the_step_down_procedure_rejects(pw: list[tuple[float, float]], alpha: float) -> None:
    p, w = [x for x, _ in pw], [y for _, y in pw]
    adj = holm(np.array(p), np.array(w))
    assert np.all(adj >= np.array(p)) and np.all(adj <= 1.0)
    by_hand = _weighted_holm_rejects(p, w, alpha)
    # ties of adj with alpha are float-sensitive: compare away from them
    clear = [i for i in range(len(p)) if abs(adj[i] - alpha) > 1e-9 * alpha]
    assert {i for i in clear if adj[i] <= alpha} == {i for i in clear if i in by_hand}


@settings(max_examples=100, deadline=None, derandomize=True)
@given(pvals, st.floats(0.01, 1000.0))
def test_equal_weights_of_any_scale_give_plain_holm(p: list[float], scale: float) -> None:
    assert holm(np.array(p), np.full(len(p), scale)).tolist() == pytest.approx(holm(np.array(p)).tolist())


def test_weighted_holm_known_values_and_errors() -> None:
    # weights 3:1: the first hypothesis is tested at 3/4 alpha, the second at 1/4 alpha
    assert holm([0.03, 0.01], [3.0, 1.0]).tolist() == pytest.approx([0.04, 0.04])
    assert holm([0.03, 0.02], [3.0, 1.0]).tolist() == pytest.approx([0.04, 0.04])
    assert holm([0.01, 0.03], [1.0, 3.0]).tolist() == pytest.approx([0.04, 0.04])
    assert holm([0.001, 0.5], [1.0, 1.0]).tolist() == pytest.approx([0.002, 0.5])
    with pytest.raises(ValueError, match="`weights` must have the shape"):
        holm([0.1, 0.2], [1.0])
    with pytest.raises(ValueError, match="`weights` must be finite and > 0, found 0.0 at index 1"):
        holm([0.1, 0.2], [1.0, 0.0])


def test_weighted_holm_controls_the_family_wise_error_with_uneven_weights() -> None:
    """All nulls true, independent uniform p-values, weights 1:1:8 + 37 x 1 (seeded): the rate
    of any rejection at alpha 0.05 stays within the binomial band of at most alpha."""
    rng = np.random.default_rng(20261204)
    w = np.array([1.0, 1.0, 8.0] + [1.0] * 37)
    reps, alpha = 20_000, 0.05
    hits = sum(bool((holm(rng.uniform(size=w.size), w) <= alpha).any()) for _ in range(reps))
    assert stats.binom.sf(hits - 1, reps, alpha) > 1e-3, hits
    # and the weights matter: the heavy hypothesis alone is rejected at 8/47 alpha, not alpha/40
    assert holm(np.r_[[1.0, 1.0, alpha * 8 / 47 * 0.99], np.ones(37)], w)[2] <= alpha
    assert holm(np.r_[[1.0, 1.0, alpha * 8 / 47 * 0.99], np.ones(37)])[2] > alpha
