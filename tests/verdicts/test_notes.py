"""Notes as data (#43 item 2): result.json stores each note as a record of its numbers and token ids; the faces
word it (speceq.verdicts.reasons.note_line), in the words the analysis used to store."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from speceq.errors import ConfigError
from speceq.faces.cli import load_result
from speceq.stats.pit_law import PITLawBound, PITLawPosition
from speceq.verdicts.failures import FailureKind, HardFailure
from speceq.verdicts.notes import Note, NoteKind, OffsetReading, offset_notes, sampling_time_note
from speceq.verdicts.reasons import note_line, note_lines
from speceq.verdicts.result import CaseResult, RunResult, TestOutcome
from speceq.verdicts.verdict import Verdict

OUTSIDE = HardFailure(kind=FailureKind.OUTSIDE_MARGIN, prompt=0, position=2, token=104, prefix=(72, 101, 108),
                      vocab_size=259, row=7, margin_nats=3.5, threshold_nats=0.5)
ZERO = HardFailure(kind=FailureKind.ZERO_PROBABILITY, prompt=1, position=0, token=33, prefix=(72, 105),
                   vocab_size=259, row=3)


def _z(name: str, z: float, p: float) -> TestOutcome:
    return TestOutcome(name=name, family="oracle", primary=False, statistic=z, pvalue=p)


PAIRS = [(_z("baseline z argmax leak", 4.1, 1e-5), _z("z argmax leak", 4.3, 1e-5), _z("argmax comparison", 0, 0.4)),
         (_z("baseline z draft drift", 0.2, 0.8), _z("z draft drift", -5.0, 1e-6),
          _z("draft log-ratio comparison", 0, 1e-5)),
         (_z("baseline z draft ratio", 0.2, 0.8), _z("z draft ratio", -5.0, 1e-6), None),
         (_z("baseline z temperature drift", 0.2, 0.8), _z("z temperature drift", 1.0, 0.3), None)]  # quiet: none

#: The sentences the analysis stored before notes were records (made with the code of main a3ce140).
OLD_WORDS = {
    "outside": "the baseline emits 4 token(s) outside the processed support by more than the numerics margin (every "
               "law whose logits are within 0.5 nats of the oracle's excludes it), e.g. row 7 (prompt 0) position 2: "
               "token 'h' after 'Hel' (its exclusion margin 3.5 nats): the engines' logits are further from the "
               "oracle's than --support-margin-nats 0.5 (or the baseline is not correct); no support hard failure, "
               "the support comparison decides",
    "zero": "the baseline too emits tokens of probability 0 under the oracle (3 tokens, e.g. row 3 (prompt 1) position "
            "0: token '!' has probability 0 under the processed target after 'Hi'): the oracle's processed law is not "
            "the engines' at its support's edge (e.g. bf16 rounding at a top-p boundary); the support comparison "
            "decides whether the candidate has more of them",
    "offsets": [
        "z argmax leak: both engines depart from the oracle (baseline z = +4.10, candidate z = +4.30), the candidate "
        "no more than the baseline (comparison p = 0.4): the oracle or the numerics, not the speculation",
        "z draft drift: the candidate departs from the oracle more than the baseline does (baseline z = +0.20, "
        "candidate z = -5.00); the comparison of the two engines rejects (p = 1e-05): the speculation, not the oracle",
        "z draft ratio: one engine departs from the oracle (baseline z = +0.20, candidate z = -5.00) but the "
        "comparison of the two does not reject (not run): a one-sample diagnostic, not evidence against the candidate",
    ],
    "time": "at this run's sampling speed (900 and 300 tokens/s), 2500 samples per engine need about 71 s more "
            "sampling (the oracle's scoring not included)",
    "boundary": "numerics boundary: 12 of 3000 candidate rows and 0 of 3000 baseline rows hold a token of oracle "
                "probability 0 that a law within 0.5 nats of logit error admits (the engines declare different "
                "numerics: baseline float32 on cpu, candidate bfloat16 on cpu); read as numerics at a processing cut, "
                "not as a hard failure, and scored 0 in the row-score comparisons",
    "fixed": "the fixed-size analysis of the same rows would say inconclusive (TV upper bound 0.2100); it is shown for "
             "comparison only, since it is not valid after looking at the data along the way",
    "sequential": "sequential mode: 9 e-processes at level alpha/9 each (e-value Bonferroni, valid at every look); TV "
                  "bounds time-uniform over the look grid",
}


def _every_note() -> tuple[Note, ...]:
    return (
        Note(kind=NoteKind.TOP_K_ORACLE), Note(kind=NoteKind.UNBOUNDED_SUPPORT),
        Note(kind=NoteKind.BASELINE_OUTSIDE_MARGIN, values={"count": 4}, example=OUTSIDE),
        Note(kind=NoteKind.BASELINE_ZERO_PROBABILITY, values={"count": 3}, example=ZERO),
        Note(kind=NoteKind.NUMERICS_BOUNDARY, values={
            "candidate_rows": 12, "candidate_total": 3000, "baseline_rows": 0, "baseline_total": 3000,
            "margin_nats": 0.5, "baseline_dtype": "float32", "baseline_device": "cpu", "candidate_dtype": "bfloat16",
            "candidate_device": "cpu"}),
        *offset_notes(PAIRS, 1e-3),
        sampling_time_note(2500, 500, prompts=2, candidate_tokens=4000, baseline_tokens_per_s=900.0,
                           candidate_tokens_per_s=300.0),
        Note(kind=NoteKind.FIXED_SIZE_VERDICT, values={"verdict": "inconclusive", "tv_upper_bound": 0.21}),
        Note.words("a face's own words"),
    )


def test_notes_are_worded_at_the_faces_in_the_words_the_analysis_used_to_store() -> None:
    notes = _every_note()
    words = note_lines(notes)
    assert words[2] == OLD_WORDS["outside"] and words[3] == OLD_WORDS["zero"] and words[4] == OLD_WORDS["boundary"]
    assert list(words[5:8]) == OLD_WORDS["offsets"] and words[8] == OLD_WORDS["time"]
    assert words[9] == OLD_WORDS["fixed"] and words[10] == "a face's own words"
    assert words[0].startswith("the oracle knows only the top-K") and words[1].startswith("the oracle cannot bound")
    assert note_line(Note(kind=NoteKind.SEQUENTIAL_MODE, values={"tests": 9})) == OLD_WORDS["sequential"]
    assert "no TV bound" in note_line(Note(kind=NoteKind.FIXED_SIZE_VERDICT, values={"verdict": "shifted",
                                                                                        "tv_upper_bound": None}))
    bound = PITLawBound(bound=0.118, worst_position=1, rows=700, alpha=1e-3, positions=(
        PITLawPosition(position=0, n=700, statistic=0.02, reach_upper=1.0, bound=0.09),
        PITLawPosition(position=1, n=650, statistic=0.031, reach_upper=0.95, bound=0.118)))
    from speceq.pipeline.analysis import pit_law_note

    assert note_line(pit_law_note(bound)) == bound.summary()


def test_notes_hold_their_numbers_and_token_ids_not_sentences() -> None:
    readings = offset_notes(PAIRS, 1e-3)
    assert [n.values["reading"] for n in readings] == [OffsetReading.SHARED, OffsetReading.SPECULATION,
                                                       OffsetReading.ONE_ENGINE]
    assert readings[1].values == {"test": "z draft drift", "baseline_z": 0.2, "candidate_z": -5.0,
                                  "comparison_pvalue": 1e-5, "reading": "speculation"}
    assert sampling_time_note(2500, 500, prompts=2, candidate_tokens=4000, baseline_tokens_per_s=900.0,
                              candidate_tokens_per_s=300.0).values["seconds"] == pytest.approx(71.11, abs=0.01)
    assert sampling_time_note(400, 500, prompts=1, candidate_tokens=10, baseline_tokens_per_s=1.0,
                              candidate_tokens_per_s=1.0) is None
    case = CaseResult(case_id="c", case={}, verdict=Verdict.INCONCLUSIVE, reason="r", tolerance=0.15, n_baseline=1,
                      n_candidate=1, notes=_every_note())
    run = RunResult(verdict=Verdict.INCONCLUSIVE, alpha=1e-3, tolerance=0.15, seed=0, engines={}, cases=(case,),
                    notes=(Note(kind=NoteKind.SEQUENTIAL_MODE, values={"tests": 9}),))
    saved = json.loads(run.to_json())
    stored = saved["cases"][0]["notes"]
    assert all(isinstance(n, dict) and n["kind"] for n in stored)
    assert stored[2]["example"]["prefix"] == [72, 101, 108] and stored[2]["example"]["token"] == 104
    assert stored[4]["values"]["candidate_rows"] == 12 and stored[4]["text"] == ""
    assert saved["notes"] == [{"kind": "sequential mode", "values": {"tests": 9}, "example": None, "text": ""}]
    assert RunResult.from_json(run.to_json()) == run


def test_a_result_saved_when_notes_were_sentences_still_loads_and_reads_the_same(tmp_path: Path) -> None:
    case = CaseResult(case_id="c", case={}, verdict=Verdict.EQUIVALENT, reason="r", tolerance=0.15, n_baseline=1,
                      n_candidate=1)
    old = RunResult(verdict=Verdict.EQUIVALENT, alpha=1e-3, tolerance=0.15, seed=0, engines={}, cases=(case,)).to_dict()
    old["notes"] = ["sequential mode: 9 e-processes ..."]
    old["cases"][0]["notes"] = [OLD_WORDS["zero"], OLD_WORDS["time"]]
    path = tmp_path / "result.json"
    path.write_text(json.dumps(old))
    loaded = load_result(path)
    assert [n.kind for n in loaded.cases[0].notes] == [NoteKind.TEXT, NoteKind.TEXT]
    assert note_lines(loaded.cases[0].notes) == (OLD_WORDS["zero"], OLD_WORDS["time"])
    assert note_lines(loaded.notes) == ("sequential mode: 9 e-processes ...",)
    old["cases"][0]["notes"] = [{"kind": "a kind from the future", "values": {}}]
    path.write_text(json.dumps(old))
    with pytest.raises(ConfigError, match="a kind from the future"):
        load_result(path)


def test_an_infinite_margin_round_trips_and_reads_as_any_finite_error() -> None:
    note = Note(kind=NoteKind.NUMERICS_BOUNDARY, values={
        "candidate_rows": 1, "candidate_total": 10, "baseline_rows": 1, "baseline_total": 10, "margin_nats": math.inf,
        "baseline_dtype": None, "baseline_device": None, "candidate_dtype": "bfloat16", "candidate_device": ""})
    case = CaseResult(case_id="c", case={}, verdict=Verdict.EQUIVALENT, reason="r", tolerance=0.15, n_baseline=1,
                      n_candidate=1, notes=(note,))
    again = RunResult.from_json(RunResult(verdict=Verdict.EQUIVALENT, alpha=1e-3, tolerance=0.15, seed=0, engines={},
                                          cases=(case,)).to_json()).cases[0].notes[0]
    assert again == note
    assert "within any finite logit error" in note_line(again)
    assert "baseline undeclared, candidate bfloat16);" in note_line(again)


def test_the_report_and_the_pytest_section_word_the_records() -> None:
    from speceq.faces.pytest_support.explain import explain_run
    from speceq.reports.render import render_report

    fixed = Note(kind=NoteKind.FIXED_SIZE_VERDICT, values={"verdict": "inconclusive", "tv_upper_bound": 0.21})
    case = CaseResult(case_id="c", case={}, verdict=Verdict.INCONCLUSIVE, reason="r", tolerance=0.15, n_baseline=1,
                      n_candidate=1, notes=(fixed,))
    run = RunResult(verdict=Verdict.INCONCLUSIVE, alpha=1e-3, tolerance=0.15, seed=0, engines={}, cases=(case,),
                    notes=(Note(kind=NoteKind.SEQUENTIAL_MODE, values={"tests": 9}),))
    page = render_report(run)
    assert f"<li>{OLD_WORDS['fixed']}</li>" in page and f"<li>{OLD_WORDS['sequential']}</li>" in page
    assert f"note: {OLD_WORDS['fixed']}" in explain_run(run)
