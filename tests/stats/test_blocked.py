"""The blocked comparison (speceq.stats.blocked): one row of the smaller engine per block, exact at every level.

Exactness is checked by enumeration: for a fixed set of block multisets every assignment of the
engines' rows inside the blocks is equally likely under H0, so the size at a level is the share
of assignments whose p-value is at or below it, which must not exceed the level.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from speceq.stats import (
    RowBlocks,
    block_rows_by_prompt,
    blocked_comparison,
    blocked_conditional_size,
    compare_oracle_scores,
    pair_blocks,
    paired_comparison,
    pooled_blocked_comparison,
    pooled_comparison,
    row_blocks,
)
from speceq.stats.synthetic import sample_categorical, scores_from_probs


def _blocks(values: list[list[float]], candidate_rows: list[list[bool]]) -> RowBlocks:
    v = np.concatenate([np.asarray(x, dtype=float) for x in values])
    block = np.concatenate([np.full(len(x), i) for i, x in enumerate(values)]).astype(np.int64)
    cand = np.concatenate([np.asarray(c, dtype=bool) for c in candidate_rows])
    return RowBlocks(values=v, block=block, candidate=cand, n_blocks=len(values))


def _assignments(values: list[list[float]], minority_is_candidate: list[bool]):
    """Every placement of the smaller engine's one row in each block, with the blocks' multisets fixed."""
    for pick in itertools.product(*[range(len(x)) for x in values]):
        flags = []
        for x, i, cand_minor in zip(values, pick, minority_is_candidate):
            f = [j == i for j in range(len(x))]
            flags.append(f if cand_minor else [not y for y in f])
        yield _blocks(values, flags)


@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_the_blocked_test_is_exact_by_enumeration_both_directions(alternative: str) -> None:
    rng = np.random.default_rng(7)
    # blocks of 3 with one candidate row, of 3 with one baseline row (the drift direction), and pairs
    values = [list(rng.normal(size=3)), list(rng.normal(size=3)), list(rng.gamma(0.5, size=3)),
              list(rng.normal(size=3)), list(rng.normal(size=2)), list(rng.normal(size=2)), [1.0, 1.0, 1.0]]
    minority = [True, True, True, False, True, True, True]
    placements = list(_assignments(values, minority))
    ps = np.array([blocked_comparison(b, name="s", alternative=alternative).pvalue for b in placements])
    assert ps.size == 3 ** 5 * 2 ** 2
    for level in np.unique(ps):
        assert np.mean(ps <= level) <= level + 1e-9, (level, np.mean(ps <= level))
    assert ps.min() < 0.05  # the grid law has a tail: the check above is not vacuous
    # the conditional size the calibration averages is this share, computed from the law alone
    levels = sorted({a * (1 + 1e-9) for a in np.unique(ps)[:6]} | {0.01, 0.05})  # above the float noise of sums
    expected = [np.mean(ps <= a) for a in levels]
    assert blocked_conditional_size(placements[0], levels, alternative) == pytest.approx(expected, abs=1e-12)


def test_a_shifted_candidate_is_found_and_the_direction_is_the_candidates() -> None:
    rng = np.random.default_rng(3)
    n = 400
    pb, pc = np.repeat(np.arange(2), n), np.repeat(np.arange(2), n // 2)
    bb, bc, blocks = block_rows_by_prompt(pb, pc)
    res = blocked_comparison(row_blocks(rng.normal(size=2 * n), bb, rng.normal(size=n) + 0.5, bc, blocks), name="s")
    assert res.pvalue <= 2e-12 and res.statistic > 5 and 0.3 < res.mean_difference < 0.7 and res.n_pairs == n
    # the same shift with the candidate as the larger engine: still the candidate's direction
    bb, bc, blocks = block_rows_by_prompt(pc, pb)
    res = blocked_comparison(row_blocks(rng.normal(size=n), bb, rng.normal(size=2 * n) + 0.5, bc, blocks), name="s")
    assert res.pvalue <= 2e-12 and res.statistic > 5 and res.mean_difference > 0.3


def test_blocks_hold_every_row_and_one_row_of_the_smaller_engine_each() -> None:
    pb = np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 2])  # prompt 2: no candidate row
    pc = np.array([0, 0, 1, 1])
    bb, bc, n = block_rows_by_prompt(pb, pc)
    assert n == 4
    assert bb.tolist() == [0, 0, 0, 1, 1, 2, 2, 3, 3, -1] and bc.tolist() == [0, 1, 2, 3]
    # equal counts: the pairs of pair_rows_by_prompt, in order
    bb, bc, n = block_rows_by_prompt(np.array([0, 1, 0, 1]), np.array([1, 0, 1, 0]))
    assert n == 4 and bb.tolist() == [0, 2, 1, 3] and bc.tolist() == [2, 0, 3, 1]


def test_pairs_as_blocks_give_the_sign_flip_tests_statistic_and_a_p_value_it_bounds() -> None:
    rng = np.random.default_rng(11)
    d = rng.normal(size=500) + 0.2
    as_blocks = blocked_comparison(pair_blocks(d), name="s")
    flip = paired_comparison(np.zeros(500), d, name="s")
    assert as_blocks.statistic == pytest.approx(flip.statistic)
    assert as_blocks.pvalue <= flip.pvalue * 1.05 and as_blocks.pvalue >= flip.pvalue / 3.2
    pooled = pooled_blocked_comparison([pair_blocks(d[:200]), pair_blocks(d[200:])], name="p")
    assert pooled.statistic == pytest.approx(pooled_comparison([d[:200], d[200:]], name="p").statistic)


def test_more_rows_of_one_engine_make_the_comparison_stronger() -> None:
    """The same candidate rows against 1 and 3 control rows each (the first ones shared): the mean Z grows about
    sqrt(2r / (r + 1)) = 1.22 at r = 3."""
    one, three = [], []
    n = 1500
    for seed in range(12):
        rng = np.random.default_rng(seed)
        cand, ctrl = rng.normal(size=n) + 0.12, rng.normal(size=3 * n)
        bb, bc, blocks = block_rows_by_prompt(np.zeros(n, np.int64), np.zeros(n, np.int64))
        one.append(blocked_comparison(row_blocks(ctrl[:n], bb, cand, bc, blocks), name="s").statistic)
        bb, bc, blocks = block_rows_by_prompt(np.zeros(3 * n, np.int64), np.zeros(n, np.int64))
        three.append(blocked_comparison(row_blocks(ctrl, bb, cand, bc, blocks), name="s").statistic)
    assert 1.1 < np.mean(three) / np.mean(one) < 1.35, (np.mean(three), np.mean(one))


def test_oracle_comparisons_use_blocks_exactly_when_the_row_counts_differ() -> None:
    rng = np.random.default_rng(5)
    law = rng.dirichlet(np.ones(12))

    def scores(n: int):
        probs = np.tile(law, (n, 1))
        return scores_from_probs(probs, sample_categorical(probs, rng))

    base, cand = scores(600), scores(300)
    found = compare_oracle_scores(base, np.zeros(600, np.int64), cand, np.zeros(300, np.int64), rng=rng)
    assert found.blocks and not found.differences
    assert all(t.method.startswith("exact blocked permutation") and t.n_pairs == 300 for t in found.tests)
    equal = compare_oracle_scores(base, np.zeros(600, np.int64), scores(600), np.zeros(600, np.int64), rng=rng)
    assert equal.differences and not equal.blocks
    assert not any(t.method.startswith("exact blocked") for t in equal.tests)


def test_bad_blocks_are_refused_with_the_block_named() -> None:
    with pytest.raises(ValueError, match="block 0 holds rows of one engine only"):
        blocked_comparison(_blocks([[1.0, 2.0]], [[True, True]]), name="s")
    with pytest.raises(ValueError, match="block 0 holds 2 candidate rows of 4"):
        blocked_comparison(_blocks([[1.0, 2.0, 3.0, 4.0]], [[True, True, False, False]]), name="s")
