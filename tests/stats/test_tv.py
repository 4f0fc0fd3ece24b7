"""TV distance and its upper confidence bounds."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from speceq.stats import tv_distance, tv_to_oracle, tv_upper_bound_oracle, tv_upper_bound_two_sample

counts = st.lists(st.integers(0, 50), min_size=2, max_size=12)


def test_plug_in_values() -> None:
    assert tv_distance([10, 0], [0, 5]) == 1.0
    assert tv_distance([1, 1, 2], [2, 2, 4]) == 0.0
    assert tv_distance([3, 1], [1, 1]) == pytest.approx(0.25)
    assert tv_to_oracle([3, 1], [0.5, 0.5]) == pytest.approx(0.25)


def test_bound_formulas() -> None:
    assert tv_upper_bound_two_sample(0.1, 100, 400, 0.05) == pytest.approx(0.1 + math.sqrt((0.01 + 0.0025) * math.log(20) / 2))
    assert tv_upper_bound_oracle(0.1, 100, 0.01) == pytest.approx(0.1 + math.sqrt(math.log(100) / 200))
    assert tv_upper_bound_two_sample(0.9, 5, 5, 0.01) == 1.0  # capped: TV never exceeds 1


@settings(max_examples=80, deadline=None, derandomize=True)
@given(counts, st.data())
def test_tv_invariant_to_relabelling_and_bound_never_below_plug_in(ca: list[int], data: st.DataObject) -> None:
    cb = data.draw(st.lists(st.integers(0, 50), min_size=len(ca), max_size=len(ca)))
    if sum(ca) == 0 or sum(cb) == 0:
        return
    perm = np.array(data.draw(st.permutations(range(len(ca)))))
    a, b = np.array(ca), np.array(cb)
    tv = tv_distance(a, b)
    assert tv == pytest.approx(tv_distance(a[perm], b[perm]), abs=1e-12)
    assert tv == pytest.approx(tv_distance(b, a), abs=1e-12)
    alpha = data.draw(st.floats(1e-6, 0.5))
    assert tv_upper_bound_two_sample(tv, int(a.sum()), int(b.sum()), alpha) >= tv
    assert tv_upper_bound_oracle(tv, int(a.sum()), alpha) >= tv


def non_coverage(bound: Callable[[float, int, int, float], float], pa: float, pb: float, n1: int, n2: int,
                 alpha: float) -> float:
    """P(bound(TV_hat, n1, n2, alpha) < TV), exactly, for two laws on 2 symbols.

    Group a puts pa on symbol 0, group b pb, so TV = |pa - pb| and TV_hat = |x / n1 - y / n2|
    with x ~ Binomial(n1, pa), y ~ Binomial(n2, pb) independent: a sum over every (x, y).
    With two symbols the plug-in has almost no upward bias once |pa - pb| is a few standard
    errors, so this is where a too narrow bound shows.
    """
    x, y = np.arange(n1 + 1), np.arange(n2 + 1)
    weight = stats.binom.pmf(x, n1, pa)[:, None] * stats.binom.pmf(y, n2, pb)[None, :]
    values, where = np.unique(np.abs(x[:, None] / n1 - y[None, :] / n2), return_inverse=True)
    upper = np.array([bound(float(v), n1, n2, alpha) for v in values])[where.reshape(weight.shape)]
    return float(weight[upper < abs(pa - pb)].sum())


#: (pa, pb, n1, n2, alpha): the bound's exact non-coverage is <= 0.0063 here, a half-width bound's 0.058-0.116.
COVERAGE_CASES = [(0.5, 0.6, 300, 300, 0.05), (0.5, 0.7, 300, 300, 0.01), (0.5, 0.6, 300, 120, 0.05),
                  (0.5, 0.55, 1000, 1000, 0.05)]


@pytest.mark.parametrize(("pa", "pb", "n1", "n2", "alpha"), COVERAGE_CASES)
def test_two_sample_bound_covers_the_true_tv(pa: float, pb: float, n1: int, n2: int, alpha: float) -> None:
    """P(upper bound < true TV) <= alpha, computed exactly (no simulation)."""
    assert non_coverage(tv_upper_bound_two_sample, pa, pb, n1, n2, alpha) <= alpha


def test_the_coverage_check_fails_a_bound_of_half_the_width() -> None:
    """Planted bug: the McDiarmid margin halved. Exact non-coverage then exceeds alpha in every case."""
    def half(tv: float, n1: int, n2: int, alpha: float) -> float:
        return tv + 0.5 * (tv_upper_bound_two_sample(tv, n1, n2, alpha) - tv)

    for pa, pb, n1, n2, alpha in COVERAGE_CASES:
        assert non_coverage(half, pa, pb, n1, n2, alpha) > alpha


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: tv_distance([1, 2], [1, 2, 3]), "aligned"),
        (lambda: tv_distance([0, 0], [1, 2]), "at least one"),
        (lambda: tv_distance([-1, 2], [1, 2]), "`counts_a`"),
        (lambda: tv_to_oracle([1, 2], [0.5, 0.6]), "`probs` sums"),
        (lambda: tv_upper_bound_two_sample(0.1, 0, 5, 0.05), "`n1`"),
        (lambda: tv_upper_bound_oracle(0.1, 5, 1.5), "`alpha`"),
        (lambda: tv_upper_bound_oracle(1.5, 5, 0.05), "`tv`"),
    ],
)
def test_invalid_input_names_the_parameter(call, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        call()


def test_disjoint_samples_give_tv_exactly_one_and_a_valid_bound() -> None:
    """Rounding must not push the plug-in above 1 (it did for 3 + 7 disjoint samples)."""
    import numpy as np

    from speceq.stats import tv_distance, tv_upper_bound_two_sample

    for n_a in range(1, 30):
        for n_b in (3, 7, 10, 11):
            a = np.zeros(40, dtype=np.int64)
            b = np.zeros(40, dtype=np.int64)
            a[: min(n_a, 20)] = 1
            a[0] += n_a - min(n_a, 20)
            b[20 : 20 + n_b] = 1
            tv = tv_distance(a, b)
            assert 1.0 - 1e-12 <= tv <= 1.0
            assert tv_upper_bound_two_sample(tv, int(a.sum()), int(b.sum()), 0.001) == 1.0
