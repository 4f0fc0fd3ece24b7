"""The verdict in plain words, first, per run and per case (#47): made once in speceq.verdicts.reasons from the
result's data, printed by the console, --summary-md, the pytest explanation and the report alike."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from speceq.faces import cli
from speceq.faces.pytest_support.explain import explain_run
from speceq.reports import render_report
from speceq.verdicts.reasons import plain_case_summary, plain_run_summary
from speceq.verdicts.result import RunResult

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def example() -> RunResult:
    """4 cases: equivalent, shifted (a token moved), inconclusive (8 077 samples would decide), greedy mismatch."""
    return RunResult.from_json((ROOT / "examples" / "result-example.json").read_text(encoding="utf-8"))


def test_each_verdict_answers_the_users_question_from_the_data(example: RunResult) -> None:
    by_id = {c.case_id: plain_case_summary(c, example.alpha) for c in example.cases}
    eq = by_id["haiku/T=1"]
    assert eq.startswith("The two engines sample the same answers as far as 20,000 draws per engine can tell")
    assert "(TV bound 0.029, certificate tv)" in eq and "a different draw, not a different engine" in eq
    shifted = by_id["story/T=0.8 <mutant: draft mixture>"]
    # the token that moved most, with both engines' shares from the stored counts (1279/5000 vs 1602/5000)
    assert "'\\n' at position 0: 25.6% of the baseline's draws, 32.0% of the candidate's" in shifted
    assert by_id["code/top_p=0.9 (no oracle)"].startswith("Not decided yet: no difference shows in 600 draws")
    assert "about 8,077 draws per engine would decide (rerun with --samples 8077)" in by_id["code/top_p=0.9 (no oracle)"]
    assert "greedy answers the target clearly does not prefer" in by_id["greedy/capitals <batch 8>"]
    assert plain_run_summary(example).startswith("The candidate samples different answers from the baseline in 2 of 4")


def test_an_equivalent_run_and_an_inconclusive_run(example: RunResult) -> None:
    eq = dataclasses.replace(example, verdict="equivalent", cases=example.cases[:1])
    assert plain_run_summary(eq) == (
        "The two engines sample the same answers in the one case, as far as 20,000 draws per engine can tell (tolerance "
        "TV < 0.05). A worse-looking answer from the candidate is a different draw, not a different engine.")
    open_ = dataclasses.replace(example, verdict="inconclusive", cases=example.cases[:1] + example.cases[2:3])
    assert plain_run_summary(open_) == ("No difference shows, but 1 of 2 cases (code/top_p=0.9 (no oracle)) need more "
                                        "draws to certify the engines the same; about 8,077 draws per engine would decide.")


def test_every_face_puts_the_plain_answer_first(example: RunResult, capsys: pytest.CaptureFixture[str]) -> None:
    run_line = plain_run_summary(example)
    cli.print_summary(example)
    out = capsys.readouterr().out
    assert out.index(run_line[:60]) < out.index("┏")  # before the table
    assert out.index("story/T=0.8 <mutant: draft mixture>: The candidate samples") < out.index("┏")
    md = cli.summary_markdown(example)
    assert md.index("The candidate samples different answers from the baseline in 2 of 4") < md.index("| case |")
    assert "- `code/top_p=0.9 (no oracle)`: Not decided yet" in md
    assert explain_run(example).splitlines()[1] == f"in short: {run_line}"
    html = render_report(example)
    assert html.index('class="plain run-plain"') < html.index('id="settings"')
    assert html.count('class="plain case-plain"') == len(example.cases)
