"""Every face names the certificate in force wherever it shows a bound, and shows the bound that decided:
under ``--certificate pit-law`` the PIT-law bound, never the TV rule next to an equivalent verdict (#47 item 3)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from speceq.faces import cli
from speceq.faces.pytest_support.explain import explain_case, explain_run
from speceq.reports import render_report
from speceq.verdicts.result import RunResult

EXAMPLE = Path(__file__).resolve().parents[2] / "tests" / "reports" / "data" / "result-reference-equivalent.json"


def _pit_law_run() -> RunResult:
    """A sampling case certified by the PIT-law bound (0.081) while its TV bound (0.443) is above the tolerance."""
    result = RunResult.from_json(EXAMPLE.read_text(encoding="utf-8"))
    case = dataclasses.replace(result.cases[0], verdict="equivalent", certificate="pit-law", tv_upper_bound=0.443,
                               pit_law_upper_bound=0.081, reason="no primary test rejects and PIT-law upper bound "
                               "0.0810 < tolerance 0.15")
    return dataclasses.replace(result, verdict="equivalent", cases=(case,), certificate="pit-law")


def test_console_table_and_run_line_show_the_pit_law_bound(capsys: pytest.CaptureFixture[str]) -> None:
    cli.print_summary(_pit_law_run())
    out = capsys.readouterr().out
    assert "PIT-law bound" in out and "0.081" in out
    assert "0.443" not in out and "TV bound" not in out  # the TV bound did not decide: it is not the column shown
    assert "certificate pit-law, PIT-law bound<0.15" in out and "tolerance TV<0.15" not in out


def test_markdown_summary_names_the_certificate() -> None:
    text = cli.summary_markdown(_pit_law_run())
    assert "certificate pit-law: PIT-law bound < 0.15" in text and "tolerance TV" not in text
    assert "| case | verdict | TV | PIT-law bound | why |" in text
    row = next(x for x in text.splitlines() if x.startswith("| `def-first-token"))
    assert "| 0.081 |" in row and "0.443" not in row


def test_pytest_explanation_shows_the_bound_that_decided() -> None:
    result = _pit_law_run()
    text = explain_case(result.cases[0], result.alpha)
    assert "PIT-law bound 0.0810 < tolerance 0.15 (certificate pit-law: the verdict rests on it)" in text
    assert "the TV bound 0.4430 is shown for information, not certified" in text
    assert "certificate pit-law" in explain_run(result)


def test_html_report_describes_the_pit_law_rule_not_the_tv_rule() -> None:
    html = render_report(_pit_law_run())
    assert "Equivalence needs U" not in html and "not met" not in html  # the contradiction of #47 item 3
    assert "Certificate in force: PIT law" in html and "B = 0.081" in html
    assert re.search(r"<b>met</b>", html)
    assert "<code>pit-law</code>" in html and "equivalent means TV(baseline, candidate)" not in html
    assert "for information: not the certificate in force" in html


def test_the_tv_certificate_is_named_too_and_old_results_read_as_tv() -> None:
    result = RunResult.from_json(EXAMPLE.read_text(encoding="utf-8"))  # written before the certificate was stored
    assert "certificate" not in json.loads(EXAMPLE.read_text(encoding="utf-8"))
    assert result.certificate == "tv" and result.cases[0].certificate == "tv"
    case = result.cases[0]
    assert case.decisive_bound == case.tv_upper_bound
    assert "(certificate tv; " in explain_case(case, result.alpha)
    assert "<code>tv</code>" in render_report(result) and "Equivalence (certificate tv) needs U" in render_report(result)
    assert RunResult.from_json(_pit_law_run().to_json()) == _pit_law_run()  # the new fields round-trip


def test_the_plain_summary_names_the_pit_law_certificate_and_what_it_does_not_bound() -> None:
    from speceq.verdicts.reasons import plain_case_summary, plain_run_summary

    result = _pit_law_run()
    text = plain_case_summary(result.cases[0], result.alpha)
    assert "(PIT-law bound 0.081, certificate pit-law; it does not bound each answer's chance)" in text
    assert "0.443" not in text
    assert "(certificate pit-law: PIT-law bound < 0.15)" in plain_run_summary(result)
