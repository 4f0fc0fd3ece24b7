"""Row scores and the support comparison under the engines' numerics margin (issue #46, item 1).

A bf16 candidate against a float32 baseline emits tokens just past the float32 nucleus edge: the
float32 oracle gives them probability 0, though a law within the numerics margin admits them.
With the margin they flag no row in the support comparison and score 0 (their expectation under
the oracle's law) in every row score, so the comparisons read them neither as a hard failure nor
as drift; at margin 0 (the exact rule) everything is as before. Seeded, pure numpy, a few seconds.
"""

from __future__ import annotations

import numpy as np

from speceq.core.defaults import SUPPORT_MARGIN_NATS
from speceq.stats import boundary_rows, compare_oracle_scores, impossible_rows, row_scores
from speceq.stats.comparison import paired_comparison
from speceq.stats.oracle_rows import token_scores
from speceq.stats.synthetic import mismatch_world

ROWS = 3000


def _boundary_pair(mass: float, seed: int) -> tuple[object, object]:
    """(baseline scores, candidate scores): the baseline samples the oracle's nucleus exactly (float32-like),
    the candidate also emits the nucleus's first excluded token with probability ``mass`` per step (bf16-like)."""
    world = mismatch_world("boundary token", seed=seed, boundary_mass=mass)
    rng = np.random.default_rng(seed + 100)
    base = world.score(*world.sample(rng, ROWS, 4, law="oracle"))
    cand = world.score(*world.sample(rng, ROWS, 4, law="engine"))
    return base, cand


def test_boundary_tokens_score_zero_and_flag_no_row_only_with_a_margin() -> None:
    _, cand = _boundary_pair(5e-3, seed=1)
    zero = np.asarray(cand.prob) <= 0
    assert zero.sum() > 20  # the candidate's boundary tokens
    assert np.all(np.asarray(cand.exclusion_margin)[zero] <= SUPPORT_MARGIN_NATS)  # all inside the margin
    exact, margin = token_scores(cand), token_scores(cand, SUPPORT_MARGIN_NATS)
    assert exact["draft ratio"][zero].min() > 5  # the cap 10 less E_p: read as a strong pull toward the draft
    for name in exact:
        assert np.all(margin[name][zero] == 0.0), name
        np.testing.assert_array_equal(margin[name][~zero], exact[name][~zero])
    rows = np.asarray(cand.row)[zero]
    assert impossible_rows(cand, ROWS)[rows].all() and not impossible_rows(cand, ROWS, SUPPORT_MARGIN_NATS).any()
    assert boundary_rows(cand, ROWS, SUPPORT_MARGIN_NATS).sum() == np.unique(rows).size
    assert not boundary_rows(cand, ROWS, 0.0).any()
    np.testing.assert_allclose(row_scores(cand, ROWS, SUPPORT_MARGIN_NATS)["draft ratio"].sum(),
                               margin["draft ratio"].sum())


def test_a_numerics_boundary_is_neither_a_support_shift_nor_drift_with_the_margin() -> None:
    """The exact rule (margin 0) rejects the correct bf16-like candidate in the support comparison and the
    draft ratio scores; the margin keeps every comparison quiet and counts the boundary rows instead."""
    base, cand = _boundary_pair(5e-3, seed=1)
    rows = np.zeros(ROWS, dtype=np.int64)
    exact = compare_oracle_scores(base, rows, cand, rows)
    assert exact.support.pvalue < 1e-10
    assert {t.name: t.pvalue for t in exact.tests}["draft ratio comparison"] < 1e-4
    margin = compare_oracle_scores(base, rows, cand, rows, margin_nats=SUPPORT_MARGIN_NATS)
    assert margin.support.candidate_flagged == 0 and margin.support.pvalue == 1.0
    assert min(t.pvalue for t in margin.tests) > 1e-3
    assert margin.candidate_boundary_rows == exact.support.candidate_flagged > 50 and margin.baseline_boundary_rows == 0
    assert margin.margin_nats == SUPPORT_MARGIN_NATS


def test_a_token_outside_the_margin_still_flags_its_row() -> None:
    """A top-p leak far past the nucleus edge (the least likely token) is support evidence at any finite margin."""
    world = mismatch_world("boundary token", seed=2)
    rng = np.random.default_rng(7)
    tokens, lengths = world.sample(rng, ROWS, 4, law="oracle")
    far = np.argmin(world.raw_initial, axis=1)[0]
    tokens[:40, 0] = far  # 40 rows start with a token the nucleus excludes by far
    scores = world.score(tokens, lengths)
    planted = (np.asarray(scores.row) < 40) & (np.asarray(scores.position) == 0)
    assert np.asarray(scores.exclusion_margin)[planted].min() > 2 * SUPPORT_MARGIN_NATS
    flagged = impossible_rows(scores, ROWS, SUPPORT_MARGIN_NATS)
    assert flagged[:40].all() and not flagged[40:].any()


def test_the_scores_with_a_margin_stay_exact_under_h0() -> None:
    """Both engines of one law, boundary tokens included: the paired comparisons of the margin's scores reject
    at 5 % no more often than 5 % allows over 100 seeded repetitions (a row score of the row alone)."""
    world = mismatch_world("boundary token", seed=3, boundary_mass=2e-2)
    rng = np.random.default_rng(11)
    rejections, reps, n = 0, 100, 150
    for _ in range(reps):
        a = world.score(*world.sample(rng, n, 4, law="engine"))
        b = world.score(*world.sample(rng, n, 4, law="engine"))
        wa, wb = row_scores(a, n, SUPPORT_MARGIN_NATS), row_scores(b, n, SUPPORT_MARGIN_NATS)
        rejections += paired_comparison(wa["draft ratio"], wb["draft ratio"], name="h0").pvalue <= 0.05
    assert rejections <= 13  # P(Binomial(100, 0.05) > 13) = 5e-4
