"""The kernel-check HTML: the standalone page and the section of the run report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from speceq.errors import ConfigError
from speceq.reports.kernels import render_kernel_report, render_kernel_section, worst_kernel_verdict

RESULT = {
    "kernel": "k<script>", "spec": {"layout": "padded", "method": "standard", "lossy": False}, "verdict": "shifted",
    "reason": "1 of 2 tests reject", "alpha": 1e-3, "seconds": 1.5, "device": "cpu", "seed": 0,
    "tests": [{"scenario": "s", "template": "t", "component": "bonus", "position": 2, "n": 100, "pvalue": 1e-9,
               "holm": 2e-9, "tv": 0.3, "tv_upper": 0.4, "rejected": True},
              {"scenario": "s", "template": "t", "component": "token", "position": 0, "n": 100, "pvalue": 0.4,
               "holm": 0.8, "tv": 0.05, "tv_upper": 0.2, "rejected": False}],
    "violations": [{"kind": "id-range", "template": "s/t", "count": 3, "example": "tokens [70000]"}],
    "findings": [{"text": "bonus law wrong on requests with temperature != 1"}],
    "scenarios": [{"name": "s", "vocab_size": 61, "templates": 1, "requests": 100, "kernel_seconds": 0.1,
                   "harness_seconds": 0.01, "skipped": ["boundary uniforms"]}],
}


def test_the_page_shows_verdict_findings_invariants_and_tests_escaped() -> None:
    html = render_kernel_report([RESULT, {**RESULT, "kernel": "ok", "verdict": "equivalent", "violations": [],
                                          "findings": []}])
    assert "SHIFTED" in html and "bonus law wrong on requests with temperature != 1" in html
    assert "tokens [70000]" in html and "boundary uniforms" in html and "k&lt;script&gt;" in html
    assert "<script>" not in html
    assert html == render_kernel_report([RESULT, {**RESULT, "kernel": "ok", "verdict": "equivalent",
                                                  "violations": [], "findings": []}])


def test_worst_verdict_and_bad_input() -> None:
    assert worst_kernel_verdict([{"verdict": "equivalent"}, {"verdict": "lossy"}]) == "lossy"
    assert worst_kernel_verdict([{"verdict": "equivalent"}, {"verdict": "shifted"}]) == "shifted"
    with pytest.raises(ConfigError):
        render_kernel_report([{"kernel": "x"}])
    with pytest.raises(ConfigError):
        render_kernel_report([{**RESULT, "verdict": "great"}])
    assert str(render_kernel_section([])) == ""


def test_the_run_report_includes_the_section(tmp_path: Path) -> None:
    from speceq.reports import render_report
    from speceq.verdicts.result import RunResult

    example = Path(__file__).resolve().parents[2] / "examples" / "result-example.json"
    run = RunResult.from_json(example.read_text())
    html = render_report(run, kernels=[RESULT])
    assert "Kernel checks" in html and "kernel-1" in html
    assert "Kernel checks" not in render_report(run)
    json.dumps(RESULT)


def test_a_test_on_a_kernel_chosen_subset_says_so() -> None:
    subset = {"scenario": "s", "template": "u", "component": "length", "position": None, "n": 44, "pvalue": 1e-12,
              "holm": 1e-10, "tv": 0.9, "tv_upper": 1.0, "rejected": False, "requests": 400, "unread": 356}
    html = render_kernel_report([{**RESULT, "tests": [*RESULT["tests"], subset]}])
    assert "356 of 400 requests unreadable: not a law test" in html
    assert "unreadable" not in render_kernel_report([RESULT])
