"""The support comparison under the engines' numerics margin (issue #46, item 1).

A bf16 candidate against a float32 baseline emits tokens just past the float32 nucleus edge: the
float32 oracle gives them probability 0, though a law within the numerics margin admits them.
With the margin they flag no row in the support comparison; at margin 0 (the exact rule)
everything is as before. Seeded, pure numpy, a few seconds.
"""

from __future__ import annotations

import numpy as np

from speceq.core.defaults import SUPPORT_MARGIN_NATS
from speceq.stats import boundary_rows, compare_oracle_scores, impossible_rows
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


def test_boundary_tokens_flag_no_row_only_with_a_margin() -> None:
    base, cand = _boundary_pair(5e-3, seed=1)
    zero = np.asarray(cand.prob) <= 0
    assert zero.sum() > 20  # the candidate's boundary tokens
    assert np.all(np.asarray(cand.exclusion_margin)[zero] <= SUPPORT_MARGIN_NATS)  # all inside the margin
    rows = np.asarray(cand.row)[zero]
    assert impossible_rows(cand, ROWS)[rows].all() and not impossible_rows(cand, ROWS, SUPPORT_MARGIN_NATS).any()
    assert boundary_rows(cand, ROWS, SUPPORT_MARGIN_NATS).sum() == np.unique(rows).size
    assert not boundary_rows(cand, ROWS, 0.0).any()
    zeros = np.zeros(ROWS, dtype=np.int64)
    exact = compare_oracle_scores(base, zeros, cand, zeros)
    assert exact.support.pvalue < 1e-10
    margin = compare_oracle_scores(base, zeros, cand, zeros, margin_nats=SUPPORT_MARGIN_NATS)
    assert margin.support.candidate_flagged == 0 and margin.support.pvalue == 1.0
    assert margin.candidate_boundary_rows == exact.support.candidate_flagged > 50 and margin.baseline_boundary_rows == 0


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
