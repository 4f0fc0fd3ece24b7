"""speceq.verdicts.reasons: the deciding test is the one the decision layer names; texts for every face."""

from __future__ import annotations

import dataclasses
import shlex

import pytest

from speceq.verdicts.decide import CaseEvidence, decide_run
from speceq.verdicts.reasons import (
    argv_rerun_command,
    decided_by,
    deciding_test,
    effect,
    engine_label,
    meaning,
    samples_needed,
    skipped_tests,
)
from speceq.verdicts.result import CaseResult, RunResult, TestOutcome

ALPHA = 1e-3


def _test(name: str, p: float, stat: float = 5.0, summary: str = "") -> TestOutcome:
    return TestOutcome(name=name, family="oracle", primary=True, statistic=stat, pvalue=p, summary=summary)


def _case(tests, **kw) -> CaseResult:
    ev = CaseEvidence(case_id="c", tests=tuple(tests), tv_estimate=0.1, tv_upper_bound=0.2, effective_support=4.0,
                      n_baseline=100, n_candidate=100, hard_failures=kw.pop("hard_failures", ()))
    d = decide_run([ev], alpha=ALPHA, tolerance=0.05)[0]
    return CaseResult(case_id="c", case={"id": "c", "params": {}}, verdict=d.verdict, reason=d.reason, tolerance=0.05,
                      n_baseline=100, n_candidate=100, tests=d.tests, hard_failures=ev.hard_failures,
                      required_n=d.required_n, **kw)


def test_deciding_test_is_the_one_the_reason_names() -> None:
    case = _case([_test("z draft drift", 1e-9, 6.1, "z drift toward draft Z=6.1, p=1e-09; mean f -0.1 vs expected -0.2 (n=900)"),
                  _test("PIT Anderson-Darling", 1e-6), _test("chi2 length", 0.3)])
    assert case.verdict == "shifted"
    test = deciding_test(case, ALPHA)
    assert test is not None and case.reason.startswith(f"{test.name} rejects")
    assert decided_by(case, ALPHA).startswith("z draft drift: Holm p=3e-09, Z=+6.1, per-token excess +0.1")
    assert "leans toward the draft" in meaning(case, ALPHA, "my_engine.py:sample")
    assert meaning(case, ALPHA, "my_engine.py:sample").startswith("my_engine.py:sample emits")


def test_no_deciding_test_for_other_verdicts_and_hard_failures() -> None:
    calm = _case([_test("chi2 length", 0.3)])
    assert calm.verdict == "inconclusive" and deciding_test(calm, ALPHA) is None and decided_by(calm, ALPHA) == ""
    assert samples_needed(calm) == f"~{calm.required_n:,} samples per engine would decide (now 100)"
    sized = dataclasses.replace(calm, min_detectable_tv=0.0834)
    assert samples_needed(sized) == (f"~{calm.required_n:,} samples per engine would decide (now 100; its tests "
                                     "detect TV shifts >= 0.083 (power 0.9))")
    hard = _case([_test("chi2 length", 0.3)], hard_failures=("row 3 (prompt 0) position 1: token 'x' has probability 0",
                                                             "another"))
    assert hard.verdict == "shifted" and decided_by(hard, ALPHA) == (
        "hard failure: row 3 (prompt 0) position 1: token 'x' has probability 0 (+1 more)")
    assert "can never do that" in meaning(hard, ALPHA, "e")


@pytest.mark.parametrize("name, stat, phrase", [
    ("z draft drift", -7.0, "leans away from the draft"),
    ("z argmax leak", 7.0, "some draws behave greedily"),
    ("z argmax leak", -7.0, "probability moved off the top token"),
    ("z temperature drift", 7.0, "sharper"),
    ("z temperature drift", -7.0, "flatter"),
    ("PIT Anderson-Darling", 40.0, "mass moved between"),
    ("chi2 GOF first token", 90.0, "first token does not follow"),
    ("chi2 length", 90.0, "different lengths"),
    ("chi2 joint first 2", 90.0, "pairs of first two tokens"),
    ("chi2 prompt 2 position 3", 90.0, "At generated position 3 of prompt 2"),
])
def test_meaning_follows_the_test_and_its_sign(name: str, stat: float, phrase: str) -> None:
    test = _test(name, 1e-12, stat)
    if name.startswith("chi2 prompt"):  # per-position tests carry their prompt and position (never parsed back)
        prompt, position = (int(w) for w in name.split()[2::2])
        test = dataclasses.replace(test, prompt=prompt, position=position)
    case = _case([test])
    assert phrase in meaning(case, ALPHA, "E")


def test_effect_reads_tv_and_z_excess_from_the_summary() -> None:
    chi2 = TestOutcome(name="chi2 prompt 0 position 0", family="two-sample", primary=True, statistic=50.0, pvalue=1e-9,
                       summary="chi2 homogeneity X2=50, dof=4, p=1e-09 (asymptotic; 5 bins, 0 merged); "
                               "TV=0.1234 <= 0.2000 (confidence 1-0.001); n=100+100")
    assert effect(chi2) == "TV=0.1234"
    assert effect(_test("PIT Anderson-Darling", 1e-9, 12.5)) == "statistic 12.5"


@pytest.mark.parametrize("argv", [
    ["run", "--candidate", "my engine.py:sample", "--samples", "300", "--fresh"],
    ["run", "--samples=300", "--candidate", "my engine.py:sample"],
])
def test_rerun_command_sets_samples_and_keeps_the_rest(argv: list[str]) -> None:
    command = argv_rerun_command(argv, 9000)
    words = shlex.split(command)
    assert words == ["speceq", "run", "--candidate", "my engine.py:sample", "--samples", "9000"]


def test_skipped_tests_and_engine_labels() -> None:
    case = CaseResult(case_id="c", case={}, verdict="equivalent", reason="r", tolerance=0.05, n_baseline=1, n_candidate=1)

    def run(oracle, provenance=None):
        return RunResult(verdict="equivalent", alpha=ALPHA, tolerance=0.05, seed=0, cases=(case,), oracle=oracle,
                         engines={"baseline": {"name": "baseline"}, "candidate": {"name": "fn", "engine": "function"}},
                         provenance=provenance or {})

    assert "--oracle-draft DIR" in skipped_tests(run({"model": {}, "draft": None}))[0]
    assert skipped_tests(run({"model": {}, "draft": {"path": "d"}})) == []
    assert "drop --no-oracle" in skipped_tests(run(None))[0]
    assert engine_label(run(None), "candidate") == "fn"
    typed = run(None, {"engines": {"candidate": {"spec": "my_engine.py:sample"}}})
    assert engine_label(typed, "candidate") == "my_engine.py:sample"
