"""The draft-score efficacy study: the locally most powerful score bounds every other, a lossless variant drifts nowhere."""

from __future__ import annotations

import pytest
from benchmark_scripts import load_script

from speceq.inputs.cases import default_cases

eff = load_script("draft_score_efficacy")


def test_no_score_beats_the_locally_most_powerful_one_and_speceqs_ratio_sees_the_biased_ratio_drift() -> None:
    cases = default_cases()[1:3]
    sums = eff.efficacy_sums("biased-ratio", cases, rows=6, seed=0)
    assert set(sums) == {c.case_id for c in cases}
    total = eff.efficacy(sums)
    best = total[eff.OPTIMAL]
    assert best > 0.1
    for name, value in total.items():  # Cauchy-Schwarz: sum(delta) <= sqrt(sum var) sqrt(sum chi2)
        assert value <= best * (1 + 1e-9), name
    assert total["min(q/p, 10) (speceq's draft ratio)"] > 0.5 * best


def test_a_lossless_variant_gives_every_score_zero_drift() -> None:
    sums = eff.efficacy_sums("draft-untruncated", default_cases()[2:3], rows=4, seed=1)
    for name, value in eff.efficacy(sums).items():  # float64 round-off only (biased-ratio: ~0.6 on this case)
        assert value == pytest.approx(0.0, abs=1e-5), name
