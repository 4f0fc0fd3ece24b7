"""Coarsened randomized PIT: its exact law under H0, its cells, and a seeded uniformity check."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from speceq.stats import pit_uniformity
from speceq.stats.coarse_pit import CoarsenedPITCells, coarsened_pit_cells, coarsened_randomized_pit

laws = st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=2, max_size=30).filter(lambda w: sum(w) > 1e-3)


def cells_of_every_token(weights: list[float], k: int) -> tuple[np.ndarray, CoarsenedPITCells]:
    """The law p (sorted descending) and the coarsened cell of each of its tokens, top-k known."""
    p = np.sort(np.asarray(weights) / np.sum(weights))[::-1]
    k = min(k, p.size)
    rank = np.where(np.arange(p.size) < k, np.arange(p.size), -1)
    return p, coarsened_pit_cells(np.tile(p[:k], (p.size, 1)), rank)


@settings(max_examples=200, deadline=None)
@given(laws, st.integers(min_value=1, max_value=30))
def test_law_of_u_is_exactly_uniform(weights, k) -> None:
    """P(u <= a) = sum_x p(x) P(low_x + V mass_x <= a) = a for every a: the cells tile [0, 1]."""
    p, cells = cells_of_every_token(weights, k)
    grid = np.linspace(0.0, 1.0, 41)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        inside = np.where(cells.mass[:, None] > 0, (grid[None, :] - cells.low[:, None]) / cells.mass[:, None],
                          (grid[None, :] >= cells.low[:, None]).astype(float))
    cdf = (p[:, None] * np.clip(inside, 0.0, 1.0)).sum(axis=0)
    np.testing.assert_allclose(cdf, grid, atol=1e-9)


@settings(max_examples=100, deadline=None)
@given(laws)
def test_top_list_covering_the_law_is_the_exact_pit(weights) -> None:
    p, cells = cells_of_every_token(weights, len(weights))
    np.testing.assert_allclose(cells.low, np.cumsum(p) - p, atol=1e-12)
    np.testing.assert_allclose(cells.mass, p, atol=1e-12)
    assert cells.tail_tokens == 0 and cells.mean_tail_mass == pytest.approx(0.0, abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(laws, st.integers(min_value=1, max_value=5), st.integers(min_value=0, max_value=2**31))
def test_u_lies_in_its_cell_and_is_seeded(weights, k, seed) -> None:
    p, cells = cells_of_every_token(weights, k)
    u = cells.randomize(np.random.default_rng(seed))
    assert np.all(u >= cells.low - 1e-12) and np.all(u <= cells.low + cells.mass + 1e-12)
    np.testing.assert_array_equal(u, cells.randomize(np.random.default_rng(seed)))
    assert cells.tail_tokens == max(0, p.size - min(k, p.size))


def test_uniform_under_h0_and_rejects_a_tempered_sampler() -> None:
    """Seeded, 20 000 tokens from 2000 random laws of 50 tokens, top-5 known: uniform (AD p > 1e-3)
    when tokens follow the law; a T = 0.8 sampler scored against the T = 1 law is rejected (p < 1e-6)."""
    rng = np.random.default_rng(3)
    logits = rng.normal(0.0, 2.0, size=(2000, 50))

    def drawn_ranks(temperature: float) -> np.ndarray:
        """Ranks (0 = most likely) of 10 tokens drawn per law at ``temperature`` (same order as at T = 1)."""
        p = np.exp(logits / temperature)
        sorted_p = np.sort(p / p.sum(axis=1, keepdims=True), axis=1)[:, ::-1]
        return np.array([rng.choice(50, size=10, p=row) for row in sorted_p])

    law = np.exp(logits)
    law = np.sort(law / law.sum(axis=1, keepdims=True), axis=1)[:, ::-1]
    for temperature, passes in ((1.0, True), (0.8, False)):
        ranks = drawn_ranks(temperature).ravel()
        top = np.repeat(law[:, :5], 10, axis=0)
        u = coarsened_randomized_pit(top, np.where(ranks < 5, ranks, -1), np.random.default_rng(4))
        p = pit_uniformity(u).anderson_darling.pvalue
        assert (p > 1e-3) if passes else (p < 1e-6), (temperature, p)


def test_frozen_and_summary() -> None:
    cells = coarsened_pit_cells(np.array([[0.5, 0.3]]), np.array([-1]))
    assert cells.low.tolist() == [0.8] and cells.mass.tolist() == pytest.approx([0.2])
    assert "top-2" in cells.summary() and "1 tokens in the tail" in cells.summary()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cells.top_k = 3  # type: ignore[misc]


@pytest.mark.parametrize(("probs", "rank", "error", "match"), [
    (np.array([[0.2, 0.5]]), np.array([0]), ValueError, "not sorted"),
    (np.array([[0.7, 0.5]]), np.array([0]), ValueError, "sums to"),
    (np.array([[0.5, 0.3]]), np.array([2]), ValueError, "outside"),
    (np.array([0.5, 0.3]), np.array([0]), TypeError, "2-D"),
    (np.array([[0.5, 0.3]]), np.array([0.0]), TypeError, "integer"),
    (np.array([[0.5, 0.3]]), np.array([0, 1]), ValueError, "entries"),
])
def test_bad_input_is_named(probs, rank, error, match) -> None:
    with pytest.raises(error, match=match):
        coarsened_pit_cells(probs, rank)
