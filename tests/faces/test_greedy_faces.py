"""Every face prints a greedy case's numbers truly (issue 46): no TV estimate (the share of row pairs that differ
only bounds a TV), no row bound next to a shifted greedy case (near 1, it says nothing of the size), and the size of
a shifted one as the share of row pairs diverging beyond a near-tie with its Clopper-Pearson interval."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from speceq.faces import cli
from speceq.faces.pytest_support.explain import explain_case
from speceq.verdicts.result import RunResult

CASES = {"defaults": {"temperature": 0.0, "max_new_tokens": 8, "tokenizer": "bytes"},
         "cases": [{"id": "g-def", "prompt": "def ", "batch_size": 4, "companions": ["class "]}]}


def _run(tmp: Path, candidate: str) -> tuple[RunResult, str, str, str]:
    """One real greedy run through ``speceq run`` (16 rows per prompt): its result, console, Markdown and HTML."""
    tmp.mkdir()
    (tmp / "cases.json").write_text(json.dumps(CASES), encoding="utf-8")
    out = tmp / "out"
    cli.main(["run", "--cases", str(tmp / "cases.json"), "--candidate", candidate, "--samples", "16", "--seed", "3",
              "--out", str(out), "--summary-md", str(tmp / "summary.md"), "--report", str(tmp / "report.html"),
              "--no-progress", "--workers", "1"])
    result = RunResult.from_json((out / "result.json").read_text(encoding="utf-8"))
    return (result, "", (tmp / "summary.md").read_text(encoding="utf-8"),
            (tmp / "report.html").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunResult, str, str, str]:
    return _run(tmp_path_factory.mktemp("greedy") / "broken", "mutant:no-rollback")


@pytest.fixture(scope="module")
def correct(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunResult, str, str, str]:
    return _run(tmp_path_factory.mktemp("greedy") / "correct", "reference")


def test_a_shifted_greedy_case_carries_its_size(broken: tuple[RunResult, str, str, str]) -> None:
    result = broken[0]
    (case,) = result.cases
    assert case.verdict == "shifted" and case.greedy is not None
    assert case.tv_estimate is None  # was 1.0, printed as "TV 1.000"
    g = case.greedy
    assert g.rows_beyond_near_tie == g.rows_compared == 32  # every row pair of both prompts diverges for real
    assert case.size is not None and case.size.estimate == 1.0
    assert case.size.high == 1.0 and case.size.low == pytest.approx((1e-3 / 2) ** (1 / 32), rel=1e-9)  # 32 of 32, two-sided
    assert "size: 100.0% of the greedy row pairs (every prompt of the batch) diverge beyond a near-tie" in case.reason
    assert "0 more row pairs diverge only at numerical near-ties" in case.reason


def test_console_and_markdown_print_no_tv_for_a_greedy_case(broken, correct, capsys: pytest.CaptureFixture[str]) -> None:
    cli.print_summary(broken[0])
    out = capsys.readouterr().out
    row = next(x for x in out.splitlines() if x.startswith("│ g-def"))
    assert re.search(r"│\s+shifted\s+│\s+—\s+│\s+—\s+│", row), row  # neither "TV 1.000" nor "TV bound 1.000"
    assert "size: 100.0% of the" in " ".join(re.sub(r"[│\s]+", " ", out).split())
    md_row = next(x for x in broken[2].splitlines() if x.startswith("| `g-def`"))
    assert "| ❌ shifted | — | — |" in md_row and "size: 100.0% of the greedy row pairs" in md_row
    cli.print_summary(correct[0])
    out = capsys.readouterr().out
    row = next(x for x in out.splitlines() if x.startswith("│ g-def"))
    bound = correct[0].cases[0].tv_upper_bound
    assert correct[0].cases[0].verdict == "inconclusive" and f"{bound:.3f}" in row  # the certificate's bound stays
    assert re.search(r"│\s+inconclusive\s+│\s+—\s+│", row), row
    md_row = next(x for x in correct[2].splitlines() if x.startswith("| `g-def`"))
    assert f"| — | {bound:.3f} |" in md_row


def test_report_and_pytest_words(broken, correct) -> None:
    html = broken[3]
    assert "plug-in estimate" not in html and "TV̂" not in html
    assert "Size of the difference" in html and "Clopper-Pearson" in html
    assert "32 diverge, by their first divergence 32 at a real mismatch" in html  # rows, not distinct divergences
    assert "Tokens the processed target gives zero probability" not in html
    text = explain_case(broken[0].cases[0], broken[0].alpha)
    assert "TV estimate" not in text and "TV bound" not in text and "size: 100.0%" in text
    assert "greedy: 0 of 32 row pairs equal; by their first divergence 32 at a real mismatch, 0 at a near-tie" in text
    html = correct[3]
    assert "Certificate: total variation of whole greedy rows" in html and "plug-in estimate" not in html
    assert "Size of the difference" not in html
    text = explain_case(correct[0].cases[0], correct[0].alpha)
    assert "TV estimate" not in text and "TV bound" in text
