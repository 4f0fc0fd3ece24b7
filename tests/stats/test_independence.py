"""The row-independence test (speceq.stats.row_independence): exact, invariant, and able to see shared randomness."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from speceq.stats import IndependenceResult, independence_pairs, row_independence


def _null_rows(rng: np.random.Generator, rows: int, positions: int, law: list[float],
               eos: bool = False) -> tuple[np.ndarray, np.ndarray]:
    tok = rng.choice(len(law), size=(rows, positions), p=law).astype(np.int64)
    lens = np.full(rows, positions, dtype=np.int64)
    if eos:
        lens = rng.integers(1, positions + 1, size=rows)
        tok[np.arange(positions)[None, :] >= lens[:, None]] = -1
    return tok, lens


@st.composite
def _designs(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rows = draw(st.integers(1, 80))
    positions = draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    tok = rng.integers(0, draw(st.integers(1, 5)), size=(rows, positions))
    lens = rng.integers(0, positions + 1, size=rows)
    groups = rng.integers(0, draw(st.integers(1, 6)), size=rows)
    strata = rng.integers(0, draw(st.integers(1, 3)), size=rows)
    return tok, lens, groups, strata


@settings(max_examples=60, deadline=None)
@given(_designs(), st.integers(0, 2**32 - 1))
def test_pvalue_is_a_probability_and_invariant_under_relabelling(design, seed) -> None:
    tok, lens, groups, strata = design
    res = row_independence(tok, lens, groups, strata)
    assert 0.0 <= res.pvalue <= 1.0
    rng = np.random.default_rng(seed)
    # any bijection of the token ids, of the group labels and of the strata labels: the same test
    tok_map = rng.permutation(1000)
    group_map = rng.permutation(1000) + 7
    stratum_map = rng.permutation(1000) - 3
    again = row_independence(tok_map[tok], lens, group_map[groups], stratum_map[strata])
    assert again.pvalue == res.pvalue
    assert (again.within_agree, again.across_agree, again.position) == (res.within_agree, res.across_agree,
                                                                        res.position)
    # tokens past a row's end are never read
    noisy = tok.copy()
    noisy[np.arange(tok.shape[1])[None, :] >= lens[:, None]] = 99
    assert row_independence(noisy, lens, groups, strata).pvalue == res.pvalue


@settings(max_examples=60, deadline=None)
@given(_designs())
def test_pairs_are_disjoint_and_respect_groups_and_strata(design) -> None:
    _, _, groups, strata = design
    within, across = independence_pairs(groups, strata)
    used = np.concatenate([within.ravel(), across.ravel()])
    assert used.size == np.unique(used).size  # no row in two pairs: the pairs are independent under H0
    assert (groups[within[:, 0]] == groups[within[:, 1]]).all()
    assert (groups[across[:, 0]] != groups[across[:, 1]]).all()
    for pairs in (within, across):
        assert (strata[pairs[:, 0]] == strata[pairs[:, 1]]).all()


def test_one_position_one_stratum_is_fishers_exact_test() -> None:
    rng = np.random.default_rng(3)
    tok, lens = _null_rows(rng, 400, 1, [0.5, 0.3, 0.2])
    groups = np.arange(400) // 40
    res = row_independence(tok, lens, groups)
    within, across = independence_pairs(groups, np.zeros(400, dtype=np.int64))
    sym = tok[:, 0]
    kw = int((sym[within[:, 0]] == sym[within[:, 1]]).sum())
    k = kw + int((sym[across[:, 0]] == sym[across[:, 1]]).sum())
    expected = sps.hypergeom.sf(kw - 1, within.shape[0] + across.shape[0], k, within.shape[0])
    assert res.statistic == kw
    assert res.pvalue == pytest.approx(expected, rel=1e-9)


def test_false_alarms_stay_at_or_below_the_level_under_independence() -> None:
    """Seeded: 3000 null designs (two prompts, EOS, 8 calls); P(p <= 0.05) within 3 sigma of at most 0.05."""
    rng = np.random.default_rng(20261207)
    rows, reps, level = 256, 3000, 0.05
    groups, strata = np.arange(rows) // 32, np.arange(rows) % 2
    p = np.array([row_independence(*_null_rows(rng, rows, 3, [0.6, 0.25, 0.1, 0.05], eos=True), groups,
                                   strata).pvalue for _ in range(reps)])
    assert (p <= level).mean() <= level + 3 * np.sqrt(level * (1 - level) / reps)
    assert (p <= 0.5).mean() <= 0.5 + 3 * np.sqrt(0.25 / reps)


def test_rows_sharing_the_first_uniform_of_their_batch_are_caught() -> None:
    """Each row's law exact, the first token's uniform shared by the 8 rows of a batch (the issue's example)."""
    rng = np.random.default_rng(5)
    rows, law = 1024, np.array([0.5, 0.3, 0.15, 0.05])
    tok, lens = _null_rows(rng, rows, 4, list(law))
    u = rng.random(rows // 8)
    tok[:, 0] = np.searchsorted(np.cumsum(law), u[np.arange(rows) // 8], side="right")
    res = row_independence(tok, lens, np.arange(rows) // 128, np.zeros(rows, dtype=np.int64))
    assert res.pvalue < 1e-12 and res.position == 0
    assert res.confidence_interval().low > 0.5  # within pairs agree always, across pairs at sum p^2 = 0.36
    independent, _ = _null_rows(rng, rows, 4, list(law))
    assert row_independence(independent, lens, np.arange(rows) // 128).pvalue > 1e-3


def test_one_call_is_not_tested() -> None:
    tok = np.zeros((10, 2), dtype=np.int64)
    res = row_independence(tok, np.full(10, 2), np.zeros(10, dtype=np.int64))
    assert isinstance(res, IndependenceResult)
    assert not res.tested and res.pvalue == 1.0 and "not tested" in res.summary()


def test_bad_input_names_the_argument() -> None:
    tok = np.zeros((4, 2), dtype=np.int64)
    with pytest.raises(ValueError, match="`groups`"):
        row_independence(tok, np.full(4, 2), np.zeros(3, dtype=np.int64))
    with pytest.raises(ValueError, match=r"`lengths\[1\]`"):
        row_independence(tok, np.array([2, 3, 1, 1]), np.zeros(4, dtype=np.int64))
    with pytest.raises(ValueError, match="`tokens`"):
        row_independence(np.zeros(4), np.full(4, 2), np.zeros(4, dtype=np.int64))


@settings(max_examples=25, deadline=None)
@given(st.integers(4, 10), st.integers(0, 2**32 - 1), st.floats(0.05, 0.95), st.integers(1, 2))
def test_pvalues_are_exactly_valid_by_enumeration(rows, seed, theta, positions) -> None:
    """Every token configuration of a small design, weighted by its probability under i.i.d. rows: P(p <= u) <= u."""
    positions = positions if rows * positions <= 10 else 1  # at most 2^10 configurations
    rng = np.random.default_rng(seed)
    groups = rng.integers(0, 3, size=rows)
    strata = rng.integers(0, 2, size=rows)
    cells = rows * positions
    bits = (np.arange(2 ** cells)[:, None] >> np.arange(cells)[None, :]) & 1  # [configurations, cells]
    weight = np.prod(np.where(bits == 1, theta, 1.0 - theta), axis=1)
    p = np.array([row_independence(b.reshape(rows, positions), np.full(rows, positions), groups, strata).pvalue
                  for b in bits])
    for u in np.unique(p):
        assert weight[p <= u].sum() <= u + 1e-12


def test_a_prompt_without_across_pairs_does_not_count() -> None:
    """Prompt 1 lives in one call only: its within pairs have nothing to be compared with and are left out
    (counting them gave p = 0 under independence, found by the enumeration test)."""
    groups = np.array([0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0])
    strata = np.array([0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1])
    within, across = independence_pairs(groups, strata)
    assert set(strata[within[:, 0]]) == {0} and set(strata[across[:, 0]]) == {0}
    tok = np.zeros((12, 1), dtype=np.int64)  # every row agrees: p = 1, not 0
    assert row_independence(tok, np.ones(12, dtype=np.int64), groups, strata).pvalue == 1.0
