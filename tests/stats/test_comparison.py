"""Two-sample comparisons of row scores (speceq.stats.comparison, speceq.stats.oracle_rows).

Validity is checked exactly: for hypothesis-drawn magnitudes every sign vector is enumerated,
so P(p <= a) under the sign-flip law is computed, not simulated. The oracle-mismatch checks
use the seeded worlds of speceq.stats.synthetic.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from speceq.stats import (
    compare_oracle_scores,
    paired_comparison,
    pooled_comparison,
    support_comparison,
)
from speceq.stats import comparison as cmp
from speceq.stats.synthetic import MISMATCH_WORLDS, mismatch_world

LEVELS = (0.5, 0.2, 0.1, 0.05, 0.02, 0.01, 1e-3)

small_magnitudes = st.lists(st.integers(0, 9), min_size=1, max_size=11)
real_magnitudes = st.lists(st.floats(0.0, 5.0, allow_subnormal=False), min_size=1, max_size=9)


def _all_signs(n: int) -> np.ndarray:
    return np.array(list(itertools.product((-1.0, 1.0), repeat=n)))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(small_magnitudes, st.integers(-60, 60))
def test_exact_signflip_tail_matches_enumeration(mags: list[int], s: int) -> None:
    m = np.array(mags, dtype=np.int64)
    sums = _all_signs(m.size) @ m
    assert cmp.signflip_sf_exact(m, s) == pytest.approx(float(np.mean(sums >= s)), abs=1e-12)


def test_fft_law_equals_direct_convolution() -> None:
    """The large-law path (closed-form characteristic function, one inverse FFT) against the direct one."""
    rng = np.random.default_rng(0)
    k = rng.integers(1, 40, size=1200)
    fft = cmp.signflip_pmf(k)  # total * rows > 2e7: the FFT path
    assert k.sum() * k.size > 2e7
    direct = np.ones(1)
    for v, m in zip(*np.unique(k, return_counts=True)):
        part = np.zeros(v * m + 1)
        part[::v] = stats.binom.pmf(np.arange(m + 1), m, 0.5)
        direct = np.convolve(direct, part)
    assert np.abs(fft - direct).max() < 1e-15
    tail_f, tail_d = np.cumsum(fft[::-1])[::-1], np.cumsum(direct[::-1])[::-1]
    deep = tail_d > 1e-9
    np.testing.assert_allclose(tail_f[deep], tail_d[deep], rtol=1e-5)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(real_magnitudes, st.sampled_from(("two-sided", "greater", "less")))
def test_paired_comparison_is_valid_given_the_magnitudes(mags: list[float], alternative: str) -> None:
    """Under H0 the signs of D are fair coins given |D|: P(p <= a) <= a for every level, exactly."""
    m = np.array(mags)
    pvals = np.array([paired_comparison(np.zeros(m.size), s * m, name="t", alternative=alternative).pvalue
                      for s in _all_signs(m.size)])
    for a in LEVELS:
        assert np.mean(pvals <= a) <= a + 1e-12, (a, np.mean(pvals <= a))


@settings(max_examples=25, deadline=None, derandomize=True)
@given(small_magnitudes)
def test_integer_scores_get_the_exact_law(mags: list[int]) -> None:
    """With integer differences the p-value is the exact sign-flip one wherever it is computed."""
    m = np.array(mags, dtype=np.float64)
    for signs in _all_signs(m.size)[:8]:
        res = paired_comparison(np.zeros(m.size), signs * m, name="t")
        if res.method == "exact sign-flip":
            s = int(abs((signs * m).sum()))
            exact = float(np.mean(np.abs(_all_signs(m.size) @ m) >= s)) if s else 1.0
            assert res.pvalue == pytest.approx(max(exact, cmp.FFT_FLOOR), rel=1e-9)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(real_magnitudes.filter(lambda x: sum(v * v for v in x) > 0), st.floats(-3.0, 4.0))
def test_gaussian_bound_holds_for_any_weights(mags: list[float], x: float) -> None:
    a = np.array(mags) / math.sqrt(sum(v * v for v in mags))
    tail = float(np.mean(_all_signs(a.size) @ a >= x - 1e-12))  # rounding: atoms at x count
    assert tail <= cmp.signflip_tail_bound(x - 1e-12) + 1e-12


def test_a_shift_of_the_candidate_is_detected_and_its_interval_covers_it() -> None:
    rng = np.random.default_rng(1)
    base, cand = rng.normal(size=2000), rng.normal(size=2000) + 0.2
    res = paired_comparison(base, cand, name="shift")
    assert res.pvalue < 1e-6 and res.statistic > 0 and res.method.startswith("exact sign-flip")
    ci = res.confidence_interval(0.99)
    assert ci.low < 0.2 < ci.high and ci.low > 0
    s, p = res
    assert (s, p) == (res.statistic, res.pvalue) and "shift" in res.summary()


def test_interval_coverage_is_at_least_nominal() -> None:
    rng = np.random.default_rng(2)
    covered = [(lambda ci: ci.low < 0.3 < ci.high)(paired_comparison(
        rng.exponential(size=200), rng.exponential(size=200) + 0.3, name="c").confidence_interval(0.9))
        for _ in range(150)]
    assert np.mean(covered) >= 0.9


def test_pairing_is_within_prompt_and_in_collection_order() -> None:
    ia, ib = cmp.pair_rows_by_prompt(np.array([0, 1, 0, 1, 0]), np.array([1, 0, 0, 1]))
    assert list(zip(ia, ib)) == [(0, 1), (1, 0), (2, 2), (3, 3)]
    assert all(np.array([0, 1, 0, 1, 0])[a] == np.array([1, 0, 0, 1])[b] for a, b in zip(ia, ib))


def test_support_comparison_is_fisher_and_stratified() -> None:
    res = support_comparison(np.zeros(5, dtype=bool), np.ones(5, dtype=bool))
    assert res.pvalue == pytest.approx(1 / math.comb(10, 5)) and res.baseline_clean
    # two prompts: 1 of 4 flagged in each engine for prompt 0, 3 candidate rows flagged of 3 for prompt 1
    fb = np.array([1, 0, 0, 0, 0, 0, 0], dtype=bool)
    sb = np.array([0, 0, 0, 0, 1, 1, 1])
    fc = np.array([1, 0, 0, 0, 1, 1, 1], dtype=bool)
    got = support_comparison(fb, fc, baseline_strata=sb, candidate_strata=sb)
    # brute force: every split of each prompt's rows between the engines, sizes fixed per prompt
    counts = []
    for s0 in itertools.combinations(range(8), 4):
        for s1 in itertools.combinations(range(6), 3):
            counts.append(sum(i < 2 for i in s0) + sum(i < 3 for i in s1))  # flagged rows drawn by the candidate
    assert got.pvalue == pytest.approx(float(np.mean(np.array(counts) >= 4)), rel=1e-12)
    assert not got.baseline_clean and got.statistic == 4
    assert 0 < got.effect < 1 and got.confidence_interval().low < got.effect < got.confidence_interval().high


def test_validation() -> None:
    with pytest.raises(ValueError, match="paired"):
        paired_comparison(np.zeros(3), np.zeros(4), name="x")
    with pytest.raises(ValueError, match="finite"):
        paired_comparison(np.array([np.nan]), np.zeros(1), name="x")
    with pytest.raises(TypeError, match="`name`"):
        paired_comparison(np.zeros(1), np.zeros(1), name="")
    with pytest.raises(ValueError, match="alternative"):
        paired_comparison(np.zeros(1), np.zeros(1), name="x", alternative="both")
    with pytest.raises(TypeError, match="boolean"):
        support_comparison(np.zeros(2), np.zeros(2, dtype=bool))
    assert paired_comparison(np.ones(4), np.ones(4), name="x").method == "degenerate"


@pytest.mark.parametrize("name", MISMATCH_WORLDS)
def test_a_shared_oracle_error_cancels_and_a_candidate_only_shift_does_not(name: str) -> None:
    """Issue #22: both engines correct but the oracle slightly wrong; the comparisons stay quiet, the
    same comparisons catch a candidate drawing from the oracle's law where the baseline draws the engines'."""
    world = mismatch_world(name, seed=3)
    rng = np.random.default_rng(4)
    rows = np.zeros(3000, dtype=np.int64)
    tb, lb = world.sample(rng, 3000, 4)
    tc, lc = world.sample(rng, 3000, 4)
    same = compare_oracle_scores(world.score(tb, lb), rows, world.score(tc, lc), rows)
    assert min(t.pvalue for t in same.tests) > 1e-3 and same.support.pvalue > 1e-3
    hot = mismatch_world("temperature 1.04", seed=3)  # the candidate alone 4 % hotter than the baseline
    t_hot, l_hot = hot.sample(rng, 3000, 4, law="engine")
    t_ref, l_ref = hot.sample(rng, 3000, 4, law="oracle")
    moved = compare_oracle_scores(hot.score(t_ref, l_ref), rows, hot.score(t_hot, l_hot), rows)
    assert min(t.pvalue for t in moved.tests) < 1e-4


@settings(max_examples=30, deadline=None, derandomize=True)
@given(real_magnitudes, st.sampled_from(("two-sided", "greater", "less")), st.booleans())
def test_conditional_size_is_the_enumerated_rejection_rate(mags: list[float], alternative: str, whole: bool) -> None:
    """The calibration's Rao-Blackwellised size equals P(p <= a) over every sign vector."""
    m = np.round(np.array(mags)) if whole else np.array(mags)
    pvals = np.array([paired_comparison(np.zeros(m.size), s * m, name="t", alternative=alternative).pvalue
                      for s in _all_signs(m.size)])
    np.testing.assert_allclose(cmp.conditional_size(m, LEVELS, alternative), [np.mean(pvals <= a) for a in LEVELS],
                               atol=1e-12)


def test_sequential_comparisons_stay_quiet_under_a_shared_error_and_catch_a_candidate_shift() -> None:
    from speceq.stats import sequential_oracle_comparisons

    world = mismatch_world("boundary token", seed=5, boundary_mass=1e-3)
    rng = np.random.default_rng(6)
    rows = np.zeros(2000, dtype=np.int64)
    sb, sc = world.score(*world.sample(rng, 2000, 4)), world.score(*world.sample(rng, 2000, 4))
    quiet = sequential_oracle_comparisons(sb, rows, sc, rows, level=1e-4)
    assert [t.name for t in quiet.tests][-1] == "seq support comparison"
    assert not any(t.rejects for t in quiet.tests) and all(r is None for r in quiet.crossing_rows)
    # a candidate that leaks out of the nucleus 20x more often than the baseline
    leaky = mismatch_world("boundary token", seed=5, boundary_mass=2e-2)
    loud = sequential_oracle_comparisons(sb, rows, leaky.score(*leaky.sample(rng, 2000, 4)), rows, level=1e-4)
    support = loud.tests[-1]
    assert support.rejects and loud.crossing_rows[-1] is not None and loud.crossing_rows[-1] < 2000


def test_permutation_comparison_matches_the_enumerated_permutation_law() -> None:
    """3 + 3 rows: every relabelling enumerated; the Monte Carlo p agrees with the exact one."""
    base, cand = np.array([0.3, 1.7, 0.2]), np.array([2.5, 1.1, 3.0])
    pooled = np.concatenate([base, cand])
    centred = pooled - pooled.mean()
    obs = abs(centred[3:].sum())
    exact = np.mean([abs(centred[list(idx)].sum()) >= obs - 1e-12 for idx in itertools.combinations(range(6), 3)])
    res = cmp.permutation_comparison(base, cand, name="t", level=1e-4, rng=np.random.default_rng(0))
    assert res.pvalue == pytest.approx(exact, abs=3 * math.sqrt(exact * (1 - exact) / 20_000) + 1e-3)
    assert res.method.startswith("stratified permutation") and res.n_pairs == 3


def test_permutation_comparison_holds_its_size_within_strata() -> None:
    """Prompts with different laws, fewer rows of the far prompt in the baseline: labels are exchanged within
    each prompt only, so the A/A size holds (pooling the strata would not: their means differ)."""
    rng = np.random.default_rng(7)
    reps, hits, pooled_hits = 1500, 0, 0
    for _ in range(reps):
        b = np.r_[rng.normal(size=12), 5 + rng.normal(size=3)]
        c = np.r_[rng.normal(size=6), 5 + rng.normal(size=9)]
        sb, sc = np.r_[np.zeros(12), np.ones(3)].astype(int), np.r_[np.zeros(6), np.ones(9)].astype(int)
        hits += cmp.permutation_comparison(b, c, name="t", level=0.05, rng=rng, baseline_strata=sb,
                                           candidate_strata=sc).pvalue <= 0.05
        pooled_hits += cmp.permutation_comparison(b, c, name="t", level=0.05, rng=rng).pvalue <= 0.05
    assert hits / reps <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / reps)
    assert pooled_hits / reps > 0.5  # the same data without strata: a spurious shift


def test_few_pairs_use_the_permutation_test_and_many_the_sign_flip() -> None:
    world = mismatch_world("temperature 1.03", seed=2)
    rng = np.random.default_rng(3)
    for n, permutation in ((20, True), (400, False)):
        rows = np.zeros(n, dtype=np.int64)
        sb, sc = world.score(*world.sample(rng, n, 4)), world.score(*world.sample(rng, n, 4))
        found = compare_oracle_scores(sb, rows, sc, rows, rng=rng, level=1e-3)
        assert found.tests and all(t.method.startswith("stratified permutation") == permutation
                                   for t in found.tests), [t.method for t in found.tests]
    small = compare_oracle_scores(sb, rows, sc, rows)  # no rng: always the sign-flip test
    assert all(not t.method.startswith("stratified") for t in small.tests)


def test_few_pairs_reach_a_holm_level_only_through_the_permutation_test() -> None:
    """10 rows per engine, the candidate's scores all above the baseline's: the sign-flip p cannot go below
    2^-9 (~0.002), the permutation p reaches 1 / C(20, 10) ~ 5e-6, so a Holm level of 1e-4 is reachable."""
    base, cand = np.linspace(0.0, 0.9, 10), np.linspace(2.0, 2.9, 10)
    flip = paired_comparison(base, cand, name="t")
    perm = cmp.permutation_comparison(base, cand, name="t", level=1e-4, rng=np.random.default_rng(1))
    assert flip.pvalue >= 2.0 ** -9 - 1e-12
    assert perm.pvalue <= 1e-4


case_magnitudes = st.lists(st.lists(st.floats(0.0, 5.0, allow_subnormal=False), min_size=1, max_size=5),
                           min_size=1, max_size=3).filter(lambda cs: sum(len(c) for c in cs) <= 11)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(case_magnitudes)
def test_pooled_comparison_is_valid_given_every_cases_magnitudes(cases: list[list[float]]) -> None:
    """Intersection null: every case's signs are fair coins given its |D|; P(pooled p <= a) <= a, enumerated."""
    mags = [np.array(c) for c in cases]
    sizes = [m.size for m in mags]
    pvals = []
    for signs in _all_signs(sum(sizes)):
        parts = np.split(signs * np.concatenate(mags), np.cumsum(sizes)[:-1])
        pvals.append(pooled_comparison(parts, name="t").pvalue)
    pvals = np.array(pvals)
    for a in LEVELS:
        assert np.mean(pvals <= a) <= a + 1e-12, (a, np.mean(pvals <= a))


def test_pooled_comparison_weighs_every_pair_alike_and_adds_up_a_shared_small_shift() -> None:
    """Six cases each shifted by 0.05 sd: no case alone reaches a Holm level of 1e-3 / 60, the pool does."""
    rng = np.random.default_rng(11)
    parts = [rng.normal(0.05, 1.0, 3000) for _ in range(6)]
    alone = [paired_comparison(np.zeros(3000), d, name="c") for d in parts]
    pooled = pooled_comparison(parts, name="pooled")
    z = [float(d.sum() / np.sqrt(d @ d)) for d in parts]
    norms = [float(np.sqrt(d @ d)) for d in parts]
    everything = np.concatenate(parts)
    assert pooled.case_statistics == pytest.approx(z)
    assert pooled.statistic == pytest.approx(everything.sum() / np.sqrt(everything @ everything))
    assert pooled.statistic == pytest.approx(np.dot(norms, z) / np.sqrt(np.dot(norms, norms)))
    assert pooled.pvalue == pytest.approx(paired_comparison(np.zeros(18000), everything, name="all").pvalue)
    assert pooled.n_cases == 6 and pooled.n_pairs == 18000
    assert max(r.pvalue for r in alone) > 1e-3 / 60 and min(r.pvalue for r in alone) > 1e-7
    assert pooled.pvalue < 1e-9
    ci = pooled.confidence_interval()
    assert pooled.effect == pytest.approx(everything.mean() / np.sqrt(np.mean(everything ** 2)))
    assert ci.low < pooled.effect < ci.high and ci.low > 0
    assert ci.low < 0.05 < ci.high


def test_pooled_comparison_lets_the_case_with_more_tokens_count_more() -> None:
    """Per-token drift: a 1-token case that the bug cannot reach no longer dilutes a 4-token case that it moves.

    Equal weight per case (Stouffer) would give (z_long + z_short) / sqrt(2); each pair weighing
    the same gives the long case its weight ||D_long|| > ||D_short||.
    """
    rng = np.random.default_rng(5)
    long_rows = rng.normal(0.02, 1.0, (3000, 4)).sum(axis=1)  # 4 tokens per row, each drifted by 0.02 sd
    short_rows = rng.normal(0.0, 1.0, 3000)  # 1 token per row, not drifted
    pooled = pooled_comparison([long_rows, short_rows], name="t")
    z_long, z_short = pooled.case_statistics
    stouffer = (z_long + z_short) / math.sqrt(2)
    assert pooled.statistic > stouffer
    w = np.array([np.linalg.norm(long_rows), np.linalg.norm(short_rows)])
    assert w[0] > 1.8 * w[1]
    assert pooled.statistic == pytest.approx(np.dot(w, [z_long, z_short]) / np.linalg.norm(w))


def test_pooled_comparison_skips_silent_cases_and_validates() -> None:
    d = np.random.default_rng(2).normal(0.0, 1.0, 200)
    with_silent = pooled_comparison([d, np.zeros(50)], name="t")
    assert with_silent.n_cases == 1 and with_silent.case_statistics[1] == 0.0
    assert with_silent.pvalue == pytest.approx(paired_comparison(np.zeros(200), d, name="t").pvalue)
    assert pooled_comparison([np.zeros(3)], name="t").method == "degenerate"
    with pytest.raises(TypeError, match="sequence of arrays"):
        pooled_comparison(np.zeros(3), name="t")
    with pytest.raises(ValueError, match=r"differences\[1\]"):
        pooled_comparison([d, np.array([np.nan])], name="t")


def test_the_recorded_differences_are_what_the_case_comparison_tests() -> None:
    world = mismatch_world("temperature 1.04", seed=5)
    rng = np.random.default_rng(6)
    rows = np.zeros(400, dtype=np.int64)
    sb, sc = (world.score(*world.sample(rng, 400, 4)) for _ in range(2))
    found = compare_oracle_scores(sb, rows, sc, rows)
    diffs = found.differences
    assert set(diffs) == {t.name.removesuffix(" comparison") for t in found.tests}
    for t in found.tests:
        k = t.name.removesuffix(" comparison")
        assert t.statistic == pytest.approx(float(diffs[k].sum() / np.sqrt(diffs[k] @ diffs[k])))
