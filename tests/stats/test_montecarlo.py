"""Monte Carlo p-values and the conditional null tables they are drawn from."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from speceq.stats.montecarlo import conditional_tables, mc_draws_for_level, sequential_mc_pvalue


@settings(max_examples=60, deadline=None)
@given(margins=st.lists(st.integers(0, 40), min_size=1, max_size=60), share=st.floats(0.0, 1.0), seed=st.integers(0, 2**32 - 1))
def test_conditional_tables_keep_both_margins(margins: list[int], share: float, seed: int) -> None:
    margins_arr = np.array(margins, dtype=np.int64)
    n_first = int(round(share * margins_arr.sum()))
    tables = conditional_tables(np.random.default_rng(seed), margins_arr, n_first, 7)
    assert tables.shape == (7, margins_arr.size)
    assert (tables.sum(axis=1) == n_first).all()
    assert ((tables >= 0) & (tables <= margins_arr)).all()


@pytest.mark.parametrize(
    ("margins", "n_first"),
    [
        (np.array([1200, 900, 800, 700]), 3000),  # few bins, many items: the "marginals" path
        (np.r_[np.full(300, 2), np.full(100, 30)], 600),  # sparse: the "count" path
    ],
)
def test_conditional_tables_follow_the_hypergeometric_law(margins: np.ndarray, n_first: int) -> None:
    """Column 0 of the null tables is hypergeometric(N, m_0, n): its histogram passes a GOF at 1e-3."""
    tables = conditional_tables(np.random.default_rng(11), margins, n_first, 20_000)
    law = sps.hypergeom(int(margins.sum()), int(margins[0]), n_first)
    column = tables[:, 0]
    lo, hi = law.ppf(0.001), law.ppf(0.999)
    edges = np.arange(lo, hi + 2)
    observed = np.histogram(np.clip(column, lo, hi), bins=edges)[0]
    expected = np.diff(np.r_[0.0, law.cdf(edges[:-2]), 1.0]) * column.size
    assert sps.chisquare(observed, expected).pvalue > 1e-3  # the end bins hold the clipped tails


def test_sequential_pvalue_is_never_below_one_over_draws_plus_one() -> None:
    pvalue, used = sequential_mc_pvalue(10.0, lambda size: np.zeros(size), 999)
    assert (pvalue, used) == (1 / 1000, 999)


def test_sequential_pvalue_stops_after_the_requested_exceedances() -> None:
    pvalue, used = sequential_mc_pvalue(0.0, lambda size: np.ones(size), 10**6, stop_after=20)
    assert (pvalue, used) == (1.0, 20)


def test_draws_for_level_resolve_the_level() -> None:
    assert mc_draws_for_level(2e-5) == 1_000_000
    assert mc_draws_for_level(1e-3) == 20_000
