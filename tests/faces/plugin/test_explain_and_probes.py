"""Pure parts of the plugin: explanations, merged results, the solo engine, repeatability."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import toy_engines

from speceq.core.params import SamplingParams
from speceq.engines.base import SampleRequest, validate_batch
from speceq.engines.function import FunctionEngine, prompt_seed
from speceq.errors import ConfigError
from speceq.faces.pytest_support.explain import explain_case, explain_run, moved_tokens, rejecting_tests, section_text
from speceq.faces.pytest_support.probes import SoloEngine, repeatability
from speceq.faces.pytest_support.session import CheckRecord, merge_results
from speceq.verdicts.reasons import note_lines
from speceq.verdicts.result import CaseResult, RunResult, TestOutcome, TokenFrequency


def outcome(name: str, p: float, holm: float | None, primary: bool = True) -> TestOutcome:
    return TestOutcome(name=name, family="two-sample", primary=primary, statistic=12.5, pvalue=p, adjusted_pvalue=holm)


def case_result(verdict: str = "shifted", **kw) -> CaseResult:
    base = dict(
        case_id="c", case={"params": {"temperature": 0.7, "max_new_tokens": 4}, "batch_size": 4}, verdict=verdict,
        reason="because", tolerance=0.05, n_baseline=1000, n_candidate=1000,
        tests=(outcome("chi2 prompt 0 position 1", 1e-6, 4e-6), outcome("chi2 prompt 0 position 0", 1e-9, 5e-9),
               outcome("chi2 length", 0.01, 0.03), outcome("PIT KS", 1e-12, None, primary=False)),
        top_tokens=(TokenFrequency(position=0, token=1, text="'a'", baseline_count=300, candidate_count=310),
                    TokenFrequency(position=0, token=2, text="'b'", baseline_count=200, candidate_count=400,
                                   oracle_prob=0.21),
                    TokenFrequency(position=1, token=3, text="'c'", baseline_count=100, candidate_count=100)),
        tv_estimate=0.2, tv_upper_bound=0.25, hard_failures=("token 'z' has probability 0",),
    )
    return CaseResult(**{**base, **kw})


def run_result(*cases: CaseResult, verdict: str = "shifted", alpha: float = 1e-3) -> RunResult:
    return RunResult(verdict=verdict, alpha=alpha, tolerance=0.05, seed=0,
                     engines={"baseline": {"name": "base"}, "candidate": {"name": "cand"}}, cases=cases,
                     provenance={"machine": {"cpu_count": 2}, "created": "now"})


def test_rejecting_tests_are_primary_holm_rejections_smallest_first() -> None:
    names = [t.name for t in rejecting_tests(case_result(), alpha=1e-3)]
    assert names == ["chi2 prompt 0 position 0", "chi2 prompt 0 position 1"]
    assert rejecting_tests(case_result(), alpha=1e-9) == []


def test_moved_tokens_rank_by_share_difference_and_drop_unmoved() -> None:
    moved = moved_tokens(case_result())
    assert [(t.position, t.token) for t in moved] == [(0, 2), (0, 1)]


def test_explain_case_shows_the_evidence() -> None:
    text = explain_case(case_result(), alpha=1e-3)
    assert text.splitlines()[0] == "case 'c' [T=0.7 len=4 batch=4]: SHIFTED — because"
    assert "    chi2 prompt 0 position 0: statistic 12.5, p=1e-09, Holm p=5e-09" in text
    assert "chi2 length" not in text and "PIT KS" not in text
    assert "  hard failure: token 'z' has probability 0" in text
    assert ("    position 0 token \"'b'\": baseline 20.0% (200/1000), candidate 40.0% (400/1000), target 21.0%"
            in text)
    assert "  TV estimate 0.2000; TV bound 0.2500 >= tolerance 0.05 (certificate tv; two-sample)" in text
    assert explain_case(case_result(), alpha=1e-3, detail=False) == text.splitlines()[0]


def test_explain_run_details_only_undecided_or_shifted_cases() -> None:
    ok = case_result("equivalent", case_id="ok", hard_failures=())
    text = explain_run(run_result(case_result(), ok))
    assert text.splitlines()[0].startswith("speceq: candidate 'cand' vs baseline 'base': run verdict SHIFTED")
    assert text.count("rejecting tests") == 1
    assert section_text([(run_result(case_result()), None)], ["info line"]).endswith("info: info line")
    assert "rejecting tests" not in section_text([(run_result(case_result()), None)])
    assert "rejecting tests" in section_text([(run_result(case_result()), None)], detail=True)


def test_merge_results_renames_cases_and_keeps_the_worst_verdict() -> None:
    eq = run_result(case_result("equivalent", hard_failures=()), verdict="equivalent")
    bad = run_result(case_result(), verdict="shifted")
    other = dataclasses.replace(eq, engines={"baseline": {"name": "base"}, "candidate": {"name": "other"}}, alpha=0.01)
    merged = merge_results([CheckRecord("t.py::b", 0, bad, "/s/b"), CheckRecord("t.py::a", 0, eq),
                            CheckRecord("t.py::a", 1, other)])
    assert [c.case_id for c in merged.cases] == ["t.py::a #1 :: c", "t.py::a #2 :: c", "t.py::b :: c"]
    assert merged.verdict == "shifted" and merged.alpha == 1e-3
    assert merged.engines == {"baseline": {"name": "base"}, "candidate #1": {"name": "cand"},
                              "candidate #2": {"name": "other"}}
    assert [c["store"] for c in merged.provenance["checks"]] == [None, None, "/s/b"]
    assert merged.provenance["machine"] == {"cpu_count": 2}
    assert any("alpha [0.01]" in n for n in note_lines(merged.notes))
    assert RunResult.from_json(merged.to_json()) == merged
    with pytest.raises(ValueError, match="no check ran"):
        merge_results([])


def test_check_record_json_round_trip() -> None:
    record = CheckRecord("t.py::x", 2, run_result(case_result()), "/store")
    assert CheckRecord.from_json(record.to_json()) == record


def toy(fn=toy_engines.correct) -> FunctionEngine:
    return FunctionEngine(fn, vocab_size=toy_engines.VOCAB, eos_token_id=toy_engines.EOS, name="toy")


def test_solo_engine_samples_each_prompt_alone_in_the_row_layout() -> None:
    params = SamplingParams(max_new_tokens=3)
    request = SampleRequest(prompts=((1,), (2, 3), (4,)), params=params, n=5, seed=11, batch_size=3)
    solo = SoloEngine(toy())
    batch = solo.sample(request)
    validate_batch(batch, request, solo)
    for i in range(3):
        alone = toy().sample(SampleRequest(prompts=(request.prompts[i],), params=params, n=5,
                                           seed=prompt_seed(11, i), batch_size=1))
        np.testing.assert_array_equal(batch.tokens[i::3], alone.tokens)
        np.testing.assert_array_equal(batch.lengths[i::3], alone.lengths)
    assert solo.name == "toy (alone)" and solo.describe()["inner"]["name"] == "toy"
    with pytest.raises(ConfigError, match="solo engine.batch_size"):
        SoloEngine(toy(), batch_size=0)


def test_repeatability_reports_different_draws_without_failing() -> None:
    request = SampleRequest(prompts=((1, 2),), params=SamplingParams(max_new_tokens=4), n=40, seed=3)
    same = repeatability(toy(), request, case_id="r")
    assert same.repeatable and same.rows == same.identical_rows == 40
    assert same.summary().endswith("all 40 rows identical")
    np.random.seed(0)
    other = repeatability(toy(toy_engines.unseeded), request, case_id="r")
    assert not other.repeatable and other.identical_rows < 40
    assert "a different draw with the same seed (information, not a failure)" in other.summary()


def test_explain_run_says_which_primary_tests_did_not_run_and_how_to_enable_them_in_pytest() -> None:
    black_box = explain_run(run_result(case_result()))  # no oracle in the result
    assert "note: oracle tests not run (black-box mode)" in black_box
    assert "--speceq-oracle=on" in black_box and "--no-oracle" not in black_box
    with_oracle = RunResult(verdict="shifted", alpha=1e-3, tolerance=0.05, seed=0, cases=(case_result(),),
                            engines={"baseline": {"name": "base"}, "candidate": {"name": "cand"}},
                            oracle={"model": {}, "draft": None}, provenance={})
    assert "note: draft ratio comparison not run" in explain_run(with_oracle)
    complete = RunResult(verdict="shifted", alpha=1e-3, tolerance=0.05, seed=0, cases=(case_result(),),
                         engines={"baseline": {"name": "base"}, "candidate": {"name": "cand"}},
                         oracle={"model": {}, "draft": {"path": "d"}}, provenance={})
    assert "note:" not in explain_run(complete)
