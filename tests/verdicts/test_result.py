"""The run's result as data: its DataFrame and its JSON form."""

from __future__ import annotations

import pandas as pd

from speceq.stats.results import Effect
from speceq.verdicts.kinds import TestKind
from speceq.verdicts.result import EFFECT_COLUMNS, POOLED_CASE_ID, CaseResult, RunResult, TestOutcome
from speceq.verdicts.verdict import Verdict

TV = Effect(name="TV", unit="total variation distance", estimate=0.04, low=0.0, high=0.09, level=0.999)
DIFF = Effect(name="row score difference", unit="score units per row", estimate=-0.2, low=-0.3, high=-0.1, level=0.95)


def _result() -> RunResult:
    tests = (
        TestOutcome(name="chi2 prompt 0 position 0", family="two-sample", primary=True, statistic=3.0, pvalue=0.2,
                    kind=TestKind.CHI2_POSITION, effect=TV, prompt=0, position=0),
        TestOutcome(name="PIT Anderson-Darling", family="oracle", primary=False, statistic=0.5, pvalue=0.7,
                    kind=TestKind.PIT_UNIFORMITY),  # a uniformity statistic: no effect
        TestOutcome(name="argmax comparison", family="oracle comparison", primary=True, statistic=-4.0, pvalue=1e-4,
                    kind=TestKind.ARGMAX_COMPARISON, effect=DIFF),
    )
    case = CaseResult(case_id="c", case={}, verdict=Verdict.SHIFTED, reason="r", tolerance=0.15, n_baseline=10,
                      n_candidate=10, tests=tests)
    empty = CaseResult(case_id="greedy", case={}, verdict=Verdict.EQUIVALENT, reason="r", tolerance=0.15,
                       n_baseline=10, n_candidate=10)
    pooled = (TestOutcome(name="pooled argmax comparison", family="pooled oracle comparison", primary=True,
                          statistic=-2.0, pvalue=0.01, adjusted_pvalue=0.03, kind=TestKind.POOLED_COMPARISON,
                          effect=Effect(name="standardised row score difference", unit="rms units", estimate=-0.1,
                                        low=-0.2, high=0.0, level=0.95)),)
    return RunResult(verdict=Verdict.SHIFTED, alpha=1e-3, tolerance=0.15, seed=0, engines={},
                     cases=(case, empty), pooled_tests=pooled)


def test_dataframe_has_each_tests_kind_and_effect_with_its_interval() -> None:
    frame = _result().to_dataframe()
    rows = {t: row for t, row in zip(frame["test"], frame.to_dict("records")) if isinstance(t, str)}
    chi2 = rows["chi2 prompt 0 position 0"]
    assert chi2["kind"] == "chi2 position" and chi2["effect"] == "TV"
    assert (chi2["effect_estimate"], chi2["effect_low"], chi2["effect_high"], chi2["effect_level"]) == (
        0.04, 0.0, 0.09, 0.999)
    assert chi2["effect_unit"] == "total variation distance"
    cmp = rows["argmax comparison"]
    assert cmp["kind"] == "argmax comparison" and cmp["effect"] == "row score difference"
    assert (cmp["effect_estimate"], cmp["effect_low"], cmp["effect_high"]) == (-0.2, -0.3, -0.1)
    pit = rows["PIT Anderson-Darling"]  # no effect: empty cells, not invented numbers
    assert pit["kind"] == "PIT uniformity"
    assert all(pd.isna(pit[k]) for k in EFFECT_COLUMNS)
    pooled = rows["pooled argmax comparison"]
    assert pooled["case_id"] == POOLED_CASE_ID and pooled["kind"] == "pooled comparison"
    assert pooled["effect_high"] == 0.0
    assert list(frame["case_id"]).count("greedy") == 1  # a case without tests keeps its one row


def test_dataframe_of_a_result_written_before_kinds_and_effects_has_empty_effect_columns() -> None:
    old = _result().to_dict()
    for c in old["cases"]:
        for t in c["tests"]:
            del t["kind"], t["effect"]
    frame = RunResult.from_dict(old).to_dataframe()
    case_rows = frame[frame["case_id"] == "c"]
    assert case_rows["kind"].isna().all() and case_rows["effect_estimate"].isna().all()
