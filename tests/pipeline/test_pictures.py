"""The report's picture data: z-test paths end at the tests' statistics; chi-square bins keep the moved bins."""

from __future__ import annotations

import math

import numpy as np
import pytest

from speceq import stats
from speceq.pipeline.pictures import MAX_BINS, PATH_POINTS, chi2_bins, martingale_paths, thin_path
from speceq.stats.synthetic import scores_from_probs


def _scores(seed: int, n: int = 3000, vocab: int = 40, draft: bool = True):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(vocab, 0.3), size=n)
    q = rng.dirichlet(np.full(vocab, 0.3), size=n) if draft else None
    x = np.minimum((p.cumsum(axis=1) < rng.random((n, 1))).sum(axis=1), vocab - 1)  # one draw per row
    return scores_from_probs(p, x, draft_probs=q)


@pytest.mark.parametrize("seed", [0, 1])
def test_each_path_ends_at_its_tests_statistic(seed: int) -> None:
    scores = _scores(seed)
    paths = {z.test: z for z in martingale_paths(scores)}
    expected = {"z argmax leak": stats.argmax_leak_z(scores), "z temperature drift": stats.temperature_drift_z(scores),
                "z draft drift": stats.draft_drift_z(scores)}
    assert set(paths) == set(expected)
    for name, res in expected.items():
        z = paths[name]
        assert z.tokens[-1] == res.n and len(z.tokens) == PATH_POINTS
        assert list(z.tokens) == sorted(set(z.tokens))
        assert z.excess[-1] / math.sqrt(z.variance[-1]) == pytest.approx(res.statistic, rel=1e-5, abs=1e-6)


def test_no_draft_no_draft_path() -> None:
    assert [z.test for z in martingale_paths(_scores(2, draft=False))] == ["z argmax leak", "z temperature drift"]


def test_short_path_keeps_every_token() -> None:
    z = thin_path("t", np.array([1.0, 0.0, 1.0]), np.full(3, 0.5), np.full(3, 0.25))
    assert z.tokens == (1, 2, 3) and z.excess == (0.5, 0.0, 0.5) and z.variance == (0.25, 0.5, 0.75)


def test_chi2_bins_keep_the_moved_bin_among_many() -> None:
    labels = [f"t{i}" for i in range(40)]
    a = np.full(40, 100)
    b = np.full(40, 100)
    b[37] = 300  # the moved bin has a small pooled count but the largest contribution
    a[0] = b[0] = 5000
    bins = chi2_bins("chi2 prompt 0 position 0", labels, a, b)
    assert len(bins.labels) == MAX_BINS and "t37" in bins.labels and bins.labels[0] == "t0"
    assert bins.n_baseline == int(a.sum()) and bins.n_candidate == int(b.sum())
    i = bins.labels.index("t37")
    assert (bins.baseline_counts[i], bins.candidate_counts[i]) == (100, 300)


def test_paths_and_bins_round_trip_through_result_json() -> None:
    from speceq.verdicts.result import CaseResult, RunResult

    scores = _scores(3, n=500)
    bins = chi2_bins("chi2 length", ["1 tokens", "2 tokens"], np.array([30, 70]), np.array([60, 40]))
    case = CaseResult(case_id="c", case={}, verdict="shifted", reason="r", tolerance=0.05, n_baseline=100,
                      n_candidate=100, z_paths=martingale_paths(scores), test_bins=(bins,))
    result = RunResult(verdict="shifted", alpha=1e-3, tolerance=0.05, seed=0, engines={}, cases=(case,))
    again = RunResult.from_json(result.to_json())
    assert again == result and again.cases[0].z_paths[0].tokens == case.z_paths[0].tokens
