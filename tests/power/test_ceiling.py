"""One-row TVs and the one-sample ceiling: the estimators, and the two claims behind them checked by enumeration."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom

from speceq.power.ceiling import (
    RowTV,
    greedy_row_tv,
    mixture_row_tv,
    one_sample_ceiling,
    support_row_tv,
)


def test_proportion_estimates_and_exact_upper_bounds() -> None:
    tv = support_row_tv(np.array([True] * 7 + [False] * 3))
    assert (tv.kind, tv.estimate, tv.rows) == ("support", 0.7, 10)
    # Clopper-Pearson, one-sided 95 %: the u with P(Binomial(10, u) <= 7) = 0.05
    assert binom.cdf(7, 10, tv.upper) == pytest.approx(0.05, abs=1e-6)
    g = greedy_row_tv(np.zeros(1000, dtype=bool))
    assert g.estimate == 0.0 and g.upper == pytest.approx(1 - 0.05 ** (1 / 1000), rel=1e-6)
    assert "one-row TV (greedy rows): 0.000" in g.summary()
    with pytest.raises(ValueError, match="non-empty"):
        greedy_row_tv(np.zeros(0, dtype=bool))


def test_mixture_bound_and_ceiling() -> None:
    sums = np.array([1.0, 2.0, 3.0, 2.0])
    tv = mixture_row_tv(0.1, sums)
    assert tv.estimate == pytest.approx(0.2) and tv.upper > tv.estimate and tv.rows == 4
    assert mixture_row_tv(1.0, np.array([5.0, 6.0])).upper == 1.0  # capped
    assert one_sample_ceiling(0.01, [tv, RowTV(kind="greedy", estimate=0.3, upper=0.35, rows=80)]) == pytest.approx(0.36)
    assert one_sample_ceiling(0.01, []) is None
    for bad in (-0.1, 1.5, True):
        with pytest.raises(ValueError, match="mix"):
            mixture_row_tv(bad, sums)
    with pytest.raises(ValueError, match="row_draft_tv_sum"):
        mixture_row_tv(0.1, np.array([1.0]))


# ---- the claims, by enumeration on random two-token "models" over a small vocabulary -------------
def laws(draw_vector, vocab: int):
    """p(x0) and p(x1 | x0) for a vocabulary of ``vocab`` symbols."""
    first = draw_vector()
    second = np.stack([draw_vector() for _ in range(vocab)])
    return first, second


def row_law(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    return first[:, None] * second  # [x0, x1]


def vectors(vocab: int):
    return st.lists(st.floats(0.01, 1.0), min_size=vocab, max_size=vocab).map(lambda v: np.asarray(v) / np.sum(v))


@settings(max_examples=60, deadline=None)
@given(data=st.data(), vocab=st.integers(2, 5), mix=st.floats(0.0, 1.0))
def test_mixture_bound_is_at_least_the_exact_row_tv(data, vocab: int, mix: float) -> None:
    vec = vectors(vocab)
    p0, p1 = laws(lambda: data.draw(vec), vocab)
    q0, q1 = laws(lambda: data.draw(vec), vocab)
    m0, m1 = (1 - mix) * p0 + mix * q0, (1 - mix) * p1 + mix * q1
    exact = 0.5 * np.abs(row_law(m0, m1) - row_law(p0, p1)).sum()
    # mix * E_mutant[TV(p_0, q_0) + TV(p_1(.|x0), q_1(.|x0))], exactly
    tv0 = 0.5 * np.abs(p0 - q0).sum()
    tv1 = 0.5 * np.abs(p1 - q1).sum(axis=1)
    bound = mix * (tv0 + float(m0 @ tv1))
    assert exact <= bound + 1e-12


@settings(max_examples=60, deadline=None)
@given(data=st.data(), vocab=st.integers(3, 6), keep=st.integers(1, 2))
def test_support_tv_is_the_chance_to_leave_the_truncated_support(data, vocab: int, keep: int) -> None:
    vec = vectors(vocab)
    p0, p1 = laws(lambda: data.draw(vec), vocab)

    def top(v: np.ndarray) -> np.ndarray:
        out = np.zeros_like(v)
        idx = np.argsort(-v, kind="stable")[:keep]
        out[idx] = v[idx]
        return out / out.sum()

    t0, t1 = top(p0), np.stack([top(r) for r in p1])
    mutant, correct = row_law(p0, p1), row_law(t0, t1)  # the mutant never truncates
    exact = 0.5 * np.abs(mutant - correct).sum()
    leaves = sum(mutant[a, b] for a, b in itertools.product(range(vocab), repeat=2) if correct[a, b] == 0)
    assert exact == pytest.approx(leaves, abs=1e-12)
