"""Token text wherever a token is shown, when the case names its tokenizer (#47 item 4): the report, the
frequency bars, the chi-square bins, samples, greedy divergences, hard failures and the pytest explanation
make their labels from stored ids with the case's tokenizer, not ``#5230``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from speceq.faces.pytest_support.explain import explain_case
from speceq.inputs.cases import load_cases
from speceq.models.bpe import load_bpe_tokenizer
from speceq.reports import render_report
from speceq.stats.counts import END
from speceq.verdicts.failures import FailureKind, HardFailure
from speceq.verdicts.reasons import TokenLabels, failure_lines, with_token_text
from speceq.verdicts.result import (
    GreedyDivergence,
    GreedySummary,
    RunResult,
    SampleText,
    TestBins,
    TokenFrequency,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "tests" / "reports" / "data" / "result-reference-equivalent.json"
BPE = load_bpe_tokenizer()
DEF, MAIN, RETURN = (BPE.token_to_id(t) for t in ("def", "Ġmain", "Ġreturn"))  # ids of the bundled BPE world


def _bpe_result(tokenizer: str | None = "bpe") -> RunResult:
    """A shifted case on the BPE world whose stored labels are ids, as the analysis makes them without the tokenizer."""
    result = RunResult.from_json(EXAMPLE.read_text(encoding="utf-8"))
    base = result.cases[0]
    spec = {**base.case, **({"tokenizer": tokenizer} if tokenizer else {})}
    plain = TokenLabels(32000)  # no tokenizer: ids as numbers
    failure = HardFailure(kind=FailureKind.ZERO_PROBABILITY, prompt=0, row=3, position=1, token=RETURN,
                          prefix=(DEF, MAIN), vocab_size=32000)
    case = dataclasses.replace(
        base, case=spec, verdict="shifted",
        top_tokens=(TokenFrequency(position=0, token=DEF, text=plain.token(DEF), baseline_count=10, candidate_count=30),),
        test_bins=(TestBins(test="chi2 joint first 2", labels=(f"{plain.token(DEF)} {plain.token(MAIN)}", "<END> <END>"),
                            baseline_counts=(5, 5), candidate_counts=(9, 1), n_baseline=10, n_candidate=10,
                            tokens=((DEF, MAIN), (END, END))),),
        samples=(SampleText(engine="candidate", prompt_index=0, text=plain.text((DEF, MAIN)), token_ids=(DEF, MAIN)),),
        greedy=GreedySummary(rows_compared=4, rows_equal=3, near_tie_threshold=0.1, divergences=(GreedyDivergence(
            prompt_index=0, position=1, baseline_token=MAIN, candidate_token=RETURN, margin=2.0,
            classification="mismatch", prefix_text=plain.text((DEF,)), rows=1, prefix_ids=(DEF,)),)),
        failures=(failure,), hard_failures=failure_lines((failure,)))
    return dataclasses.replace(result, verdict="shifted", cases=(case,))


def test_the_ids_alone_show_as_numbers_without_a_tokenizer() -> None:
    case = _bpe_result(tokenizer=None).cases[0]
    assert with_token_text(case) == case and case.top_tokens[0].text == f"#{DEF}"


def test_every_shown_token_is_text_when_the_case_names_its_tokenizer() -> None:
    case = with_token_text(_bpe_result().cases[0])
    assert case.top_tokens[0].text == "'def'"
    assert case.test_bins[0].labels == ("'def' ' main'", "<END> <END>")
    assert case.samples[0].text == "def main"
    d = case.greedy.divergences[0]
    assert (d.baseline_text, d.candidate_text, d.prefix_text) == ("' main'", "' return'", "def")
    assert "token ' return' has probability 0" in case.hard_failures[0] and "'def main'" in case.hard_failures[0]


def test_report_and_explanation_show_token_text_not_ids() -> None:
    result = _bpe_result()
    html = render_report(result)
    assert f"“#{DEF}”" not in html and "“&#39;def&#39;”" in html  # the bar's label is the token's text (id beside it)
    assert "<code>&#39; return&#39;</code>" in html  # the greedy divergence's candidate token
    text = explain_case(result.cases[0], result.alpha)
    assert "position 0 token \"'def'\"" in text and "baseline ' main' (#" in text
    assert "hard failure: row 3 (prompt 0) position 1: token ' return'" in text


def test_a_result_whose_tokenizer_is_missing_here_stays_readable(tmp_path: Path) -> None:
    result = _bpe_result(tokenizer=str(tmp_path / "gone" / "tokenizer.json"))
    assert with_token_text(result.cases[0]) == result.cases[0]
    assert f"“#{DEF}”" in render_report(result)
    old = json.loads(result.to_json())
    for b in old["cases"][0]["test_bins"]:
        del b["tokens"]  # a result.json written before bins stored their ids
    assert RunResult.from_dict(old).cases[0].test_bins[0].tokens == ()


def test_a_cases_file_keeps_the_tokenizer_it_names(tmp_path: Path) -> None:
    path = tmp_path / "cases.json"
    path.write_text(json.dumps({"cases": [{"id": "a", "prompt": "def main", "tokenizer": "bpe"},
                                          {"id": "b", "prompt": "def main"}]}), encoding="utf-8")
    a, b = load_cases(path)
    assert a.tokenizer == "bpe" and a.to_dict()["tokenizer"] == "bpe"
    assert b.tokenizer is None and "tokenizer" not in b.to_dict()  # the byte default: as before
