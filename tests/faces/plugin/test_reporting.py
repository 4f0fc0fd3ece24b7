"""Session reporting: the HTML report and merged JSON, pytest-xdist, pytest-html extras, JUnit."""

from __future__ import annotations

import pytest
from plugin_support import TOY

from speceq.verdicts.result import RunResult

TWO_TESTS = """
import pytest

@pytest.mark.parametrize("token", [1, 2])
def test_good(speceq, token):
    speceq.check({"id": f"good-{token}", "prompt_ids": [token], "max_new_tokens": 2})

def test_bad(speceq):
    speceq.check({"id": "bad", "prompt_ids": [3], "max_new_tokens": 2}, candidate="toy_engines:shifted_engine")

def test_two_checks(speceq):
    speceq.check({"id": "x", "prompt_ids": [4], "max_new_tokens": 1})
    speceq.check({"id": "x", "prompt_ids": [4], "max_new_tokens": 1}, seed=5)

def test_without_speceq():
    pass
"""
ARGS = (*TOY, "--speceq-samples=600", "--speceq-inconclusive=pass", "--speceq-report=out/report.html")
EXPECTED_CASES = {
    "test_session.py::test_bad :: bad",
    "test_session.py::test_good[1] :: good-1",
    "test_session.py::test_good[2] :: good-2",
    "test_session.py::test_two_checks #1 :: x",
    "test_session.py::test_two_checks #2 :: x",
}


def check_report(project: pytest.Pytester) -> RunResult:
    """One HTML report and its JSON beside it, holding every check of the session."""
    assert sorted(p.relative_to(project.path).as_posix() for p in project.path.rglob("*.html")) == ["out/report.html"]
    merged = RunResult.from_json((project.path / "out" / "report.json").read_text(encoding="utf-8"))
    assert {c.case_id for c in merged.cases} == EXPECTED_CASES
    assert merged.verdict == "shifted"
    assert len(merged.provenance["checks"]) == 5
    html = (project.path / "out" / "report.html").read_text(encoding="utf-8")
    for case_id in EXPECTED_CASES:
        assert case_id.replace("'", "&#39;") in html
    return merged


def test_one_report_of_every_check(project: pytest.Pytester) -> None:
    project.makepyfile(test_session=TWO_TESTS)
    result = project.runpytest(*ARGS)
    result.assert_outcomes(passed=4, failed=1)
    result.stdout.fnmatch_lines(["speceq: report of 5 checks: *out/report.html (result: *out/report.json)"])
    merged = check_report(project)
    assert merged.engines["baseline"]["name"] == "toy-baseline"
    assert {merged.engines[k]["name"] for k in merged.engines if k.startswith("candidate")} == {"toy-correct",
                                                                                               "toy-shifted"}


def test_xdist_workers_send_results_and_only_the_controller_writes(project: pytest.Pytester) -> None:
    project.makepyfile(test_session=TWO_TESTS)
    result = project.runpytest_subprocess(*ARGS, "-n", "2", "-p", "xdist")
    result.assert_outcomes(passed=4, failed=1)
    result.stdout.fnmatch_lines(["*2 workers*", "speceq: report of 5 checks: *out/report.html*"])
    check_report(project)
    # the failure explanation and report section travel from the worker to the controller
    result.stdout.fnmatch_lines(["E *DistributionMismatch: *SHIFTED*", "*- speceq -*"])


def test_no_report_without_checks(project: pytest.Pytester) -> None:
    project.makepyfile("def test_plain():\n    pass\n")
    result = project.runpytest(*ARGS)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["speceq: no check ran; no report written"])
    assert not (project.path / "out").exists()


def test_pytest_html_extra_and_junit_properties(project: pytest.Pytester) -> None:
    project.makepyfile(test_session="""
        def test_good(speceq):
            speceq.check({"id": "good", "prompt_ids": [1], "max_new_tokens": 2})
            speceq.note("an information line")
    """)
    result = project.runpytest(*TOY, "--speceq-tolerance=0.2", "--speceq-samples=600", "--html=html/index.html",
                               "--self-contained-html", "--junitxml=junit.xml")
    result.assert_outcomes(passed=1)
    page = (project.path / "html" / "index.html").read_text(encoding="utf-8")
    assert "run verdict EQUIVALENT" in page and "an information line" in page
    junit = (project.path / "junit.xml").read_text(encoding="utf-8")
    assert '<property name="speceq_check_1" value="equivalent"' in junit
