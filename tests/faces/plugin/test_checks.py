"""The speceq fixture on toy engines: verdicts become test outcomes, with the evidence shown."""

from __future__ import annotations

import json

import pytest
from plugin_support import TOY

TOLERANT = (*TOY, "--speceq-tolerance=0.2", "--speceq-samples=1000")

CASE_TEST = """
import pytest

def test_check(speceq):
    result = speceq.check(speceq.case(id="c", prompt_ids=[1, 2], max_new_tokens=3){extra})
    print("VERDICT", result.verdict, result.n_baseline)
"""


def write_case_test(project: pytest.Pytester, extra: str = "") -> None:
    project.makepyfile(test_case=CASE_TEST.replace("{extra}", extra))


def test_correct_engine_passes_with_a_report_section(project: pytest.Pytester) -> None:
    write_case_test(project)
    result = project.runpytest(*TOLERANT, "-rP", "-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "*VERDICT equivalent 1000*",
        "*- speceq -*",
        "speceq: candidate 'toy-correct' vs baseline 'toy-baseline': run verdict EQUIVALENT (1 equivalent; *",
        "case 'c' [[]T=1 len=3]: EQUIVALENT — no primary test rejects*TV upper bound 0.1* < tolerance 0.2; this certifies the per-position marginal TV of the case's prompt*",
    ])


def test_shifted_engine_fails_with_the_evidence(project: pytest.Pytester) -> None:
    write_case_test(project, ', candidate="toy_engines:shifted_engine"')
    result = project.runpytest(*TOLERANT)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "E *DistributionMismatch: speceq: candidate 'toy-shifted' vs baseline 'toy-baseline': run verdict SHIFTED*",
        "E *case 'c' [[]T=1 len=3]: SHIFTED — chi2 * rejects, Holm-adjusted p=*",
        "E *rejecting tests (Holm-adjusted p <= alpha=0.001):",
        "E *chi2 prompt 0 position *: statistic *, p=*, Holm p=*",
        "E *tokens that moved most:",
        "E *position ? token *: baseline *% (*/1000), candidate *% (*/1000)",
        "E *TV estimate 0.*; TV bound 0.* tolerance 0.2 (certificate tv; two-sample)",
    ])
    out = result.stdout.str()
    # the most moved token is token 0, which the shifted engine favours (SHIFT = 0.25)
    moved = out[out.index("tokens that moved most:"):].splitlines()[1]
    baseline_pct, candidate_pct = (float(x.split("%")[0].split()[-1]) for x in moved.split(", ")[:2])
    assert candidate_pct - baseline_pct > 15


def test_mismatch_exception_carries_the_result(project: pytest.Pytester) -> None:
    project.makepyfile(test_catch="""
        import pytest
        from speceq.errors import DistributionMismatch

        def test_catch(speceq):
            with pytest.raises(DistributionMismatch) as info:
                speceq.check([{"id": "a", "prompt_ids": [1], "max_new_tokens": 2}],
                             candidate="toy_engines:shifted_engine")
            assert info.value.verdict.verdict == "shifted"
            assert info.value.verdict.cases[0].case_id == "a"
    """)
    project.runpytest(*TOLERANT).assert_outcomes(passed=1)


@pytest.mark.parametrize(("outcome", "expected"), [("fail", "failed"), ("skip", "skipped"), ("pass", "passed")])
def test_inconclusive_outcome_option(project: pytest.Pytester, outcome: str, expected: str) -> None:
    write_case_test(project)  # a correct engine at 300 samples cannot certify TV < 0.05
    result = project.runpytest(*TOY, "--speceq-samples=300", f"--speceq-inconclusive={outcome}", "-rs", "-s")
    result.assert_outcomes(**{expected: 1})
    out = result.stdout.str()
    if outcome == "fail":
        result.stdout.fnmatch_lines(["E *EquivalenceInconclusive: INCONCLUSIVE (no shift detected, *",
                                     "E *about * samples per engine would decide (now 300)"])
    if outcome == "skip":
        result.stdout.fnmatch_lines(["SKIPPED * speceq inconclusive: case 'c': no primary test rejects*would decide*"])
    assert ("VERDICT inconclusive 300" in out) == (outcome == "pass")  # check() returned only when passing


def test_inconclusive_default_is_skip_and_keyword_overrides_it(project: pytest.Pytester) -> None:
    project.makepyfile(test_kw="""
        CASE = {"id": "c", "prompt_ids": [3], "max_new_tokens": 2}

        def test_default(speceq):
            speceq.check(CASE)

        def test_keyword_fail(speceq):
            speceq.check(CASE, inconclusive="fail")

        def test_keyword_pass(speceq):
            assert speceq.check(CASE, inconclusive="pass").verdict == "inconclusive"
    """)
    result = project.runpytest(*TOY, "--speceq-samples=300")
    result.assert_outcomes(skipped=1, failed=1, passed=1)
    result.stdout.fnmatch_lines(["FAILED test_kw.py::test_keyword_fail - *"])


def test_markers_give_cases_and_budget_and_the_command_line_overrides_the_budget(project: pytest.Pytester) -> None:
    project.makepyfile(test_markers="""
        import json, pytest

        @pytest.mark.speceq_budget(samples=150)
        @pytest.mark.speceq_case(id="first", prompt_ids=[1, 2], max_new_tokens=2)
        @pytest.mark.speceq_case(id="second", prompt_ids=[4], max_new_tokens=1, temperature=0.5)
        def test_marked(speceq):
            result = speceq.check(inconclusive="pass")
            rows = [[c.case_id, c.n_baseline, c.case["params"]["temperature"]] for c in result.cases]
            print("CASES", json.dumps(rows))

        @pytest.mark.speceq_budget(samples=150)
        def test_keyword_samples_win(speceq):
            case = {"id": "k", "prompt_ids": [1], "max_new_tokens": 1}
            result = speceq.check([case], samples=90, inconclusive="pass")
            print("KEYWORD", result.cases[0].n_baseline)
    """)
    result = project.runpytest(*TOY, "-s")
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert 'CASES [["first", 150, 1.0], ["second", 150, 0.5]]' in out and "KEYWORD 90" in out
    result = project.runpytest(*TOY, "-s", "--speceq-samples=120")
    out = result.stdout.str()
    assert 'CASES [["first", 120, 1.0], ["second", 120, 0.5]]' in out and "KEYWORD 90" in out


def test_misused_markers_and_missing_cases_are_explained(project: pytest.Pytester) -> None:
    project.makepyfile(test_misuse="""
        import pytest

        def test_no_cases(speceq):
            speceq.check()

        @pytest.mark.speceq_budget(samples=0)
        def test_bad_budget(speceq):
            pass

        @pytest.mark.speceq_case(id="x", prompt_ids=[1], tempreature=0.5)
        def test_bad_case(speceq):
            speceq.check()
    """)
    result = project.runpytest(*TOY)
    result.assert_outcomes(failed=2, errors=1)
    out = result.stdout.str()
    assert "no cases: pass cases to speceq.check() or mark the test with @pytest.mark.speceq_case" in out
    assert "marker speceq_budget: expected speceq_budget(samples=<integer >= 1>)" in out
    assert "unknown field 'tempreature' (did you mean 'temperature'?)" in out


def test_unknown_engine_fails_each_test_with_the_first_error(project: pytest.Pytester) -> None:
    project.makepyfile(test_engine="""
        def test_one(speceq):
            speceq.check({"id": "a", "prompt_ids": [1], "max_new_tokens": 1})

        def test_two(speceq):
            speceq.check({"id": "b", "prompt_ids": [1], "max_new_tokens": 1})
    """)
    result = project.runpytest(*TOY, "--speceq-candidate=toy_engines:no_such_engine")
    result.assert_outcomes(failed=2)
    assert result.stdout.str().count("speceq: cannot build the candidate engine 'toy_engines:no_such_engine'") >= 2


def test_hooks_build_engines_and_see_results(project: pytest.Pytester) -> None:
    project.makeconftest(project.path.joinpath("conftest.py").read_text() + """

def pytest_speceq_make_engine(config, role, spec, options):
    if spec == "my-engine":
        import toy_engines
        from speceq.engines.function import FunctionEngine
        return FunctionEngine(toy_engines.correct, vocab_size=6, eos_token_id=5, name=f"made-{options['tag']}")
    return None

def pytest_speceq_result(config, item, result):
    with open("results.txt", "a") as f:
        f.write(f"{item.name} {result.verdict} {result.engines['candidate']['name']}\\n")
""")
    write_case_test(project)
    result = project.runpytest(*TOLERANT, "--speceq-candidate=my-engine", "--speceq-candidate-option=tag=7")
    result.assert_outcomes(passed=1)
    assert (project.path / "results.txt").read_text() == "test_check equivalent made-7\n"


def test_store_folder_is_reused_on_a_rerun(project: pytest.Pytester) -> None:
    write_case_test(project)
    args = (*TOLERANT, "--speceq-store=samples")
    project.runpytest(*args).assert_outcomes(passed=1)
    (result_json,) = (project.path / "samples").glob("*/check1-*/result.json")
    provenance = json.loads(result_json.with_name("provenance.json").read_text())
    assert provenance["chunks"]["sampled"] == provenance["chunks"]["total"] > 0
    project.runpytest(*args).assert_outcomes(passed=1)
    provenance = json.loads(result_json.with_name("provenance.json").read_text())
    assert provenance["chunks"]["reused"] == provenance["chunks"]["total"] and provenance["chunks"]["sampled"] == 0


def test_a_marker_with_request_fields_reaches_the_run_and_an_engine_that_cannot_apply_them_fails(
    project: pytest.Pytester,
) -> None:
    """speceq_case(min_p=..., logit_bias={1: 2.0}) parses (int keys) and the toy function engines, which declare
    no sampling fields, refuse it before sampling, naming the case, the field and the engine."""
    project.makepyfile(test_fields="""
        import pytest

        @pytest.mark.speceq_case(id="biased", prompt_ids=[1, 2], max_new_tokens=2, logit_bias={1: 2.0}, min_p=0.1)
        def test_fields(speceq):
            assert speceq.marked_cases()[0].params.logit_bias == ((1, 2.0),)
            speceq.check()
    """)
    result = project.runpytest(*TOY)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*case 'biased'.min_p: the baseline engine 'toy-baseline' cannot apply min_p*"])


def test_within_tolerance_marks_the_test_xfailed_with_the_size(project: pytest.Pytester) -> None:
    """The toy shift (TV ~0.25) is certified below a numerics tolerance of 0.9: xfailed, not failed; at 0 it fails."""
    write_case_test(project, ', candidate="toy_engines:shifted_engine"')
    result = project.runpytest(*TOLERANT, "--speceq-numerics-tolerance=0.9", "-rx")
    result.assert_outcomes(xfailed=1)
    result.stdout.fnmatch_lines(["*speceq within-tolerance: case 'c': a difference is detected (*size: largest TV of * in [[]*"])
    result = project.runpytest(*TOLERANT, "--speceq-numerics-tolerance=0")
    result.assert_outcomes(failed=1)
