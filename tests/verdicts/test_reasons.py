"""speceq.verdicts.reasons: the deciding test is the one the decision layer names; texts for every face."""

from __future__ import annotations

import dataclasses
import shlex

import pytest

from speceq.stats.results import Effect
from speceq.verdicts.decide import CaseEvidence, decide_run
from speceq.verdicts.failures import FailureKind, HardFailure
from speceq.verdicts.kinds import TestKind
from speceq.verdicts.reasons import (
    argv_rerun_command,
    decided_by,
    deciding_test,
    effect,
    effect_bound,
    engine_label,
    failure_lines,
    meaning,
    samples_needed,
    skipped_tests,
)
from speceq.verdicts.result import CaseResult, RunResult, TestOutcome

ALPHA = 1e-3


#: Kinds of the test names used here whose kind is not their name.
_KINDS = {"PIT Anderson-Darling": TestKind.PIT_UNIFORMITY, "chi2 joint first 2": TestKind.CHI2_JOINT,
          "chi2 prompt 2 position 3": TestKind.CHI2_POSITION}


def _test(name: str, p: float, stat: float = 5.0, summary: str = "", effect: Effect | None = None) -> TestOutcome:
    kind = _KINDS.get(name) or TestKind(name)
    return TestOutcome(name=name, family="oracle", primary=True, statistic=stat, pvalue=p, summary=summary,
                       kind=kind, effect=effect)


def _case(tests, **kw) -> CaseResult:
    ev = CaseEvidence(case_id="c", tests=tuple(tests), tv_estimate=0.1, tv_upper_bound=0.2, effective_support=4.0,
                      n_baseline=100, n_candidate=100, hard_failures=kw.pop("hard_failures", ()))
    d = decide_run([ev], alpha=ALPHA, tolerance=0.05)[0]
    return CaseResult(case_id="c", case={"id": "c", "params": {}}, verdict=d.verdict, reason=d.reason, tolerance=0.05,
                      n_baseline=100, n_candidate=100, tests=d.tests, hard_failures=failure_lines(ev.hard_failures),
                      required_n=d.required_n, **kw)


def test_deciding_test_is_the_one_the_reason_names() -> None:
    excess = Effect(name="per-token excess", unit="f units per token", estimate=0.1, low=0.07, high=0.13, level=0.95)
    case = _case([_test("z draft drift", 1e-9, 6.1, "z drift toward draft Z=6.1, p=1e-09; mean f -0.1 vs expected -0.2 (n=900)",
                        excess),
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
    zero = HardFailure(kind=FailureKind.ZERO_PROBABILITY, prompt=0, position=1, token=ord("x"), prefix=(104, 105),
                       vocab_size=259, row=3)
    hard = _case([_test("chi2 length", 0.3)], hard_failures=(zero, dataclasses.replace(zero, row=4)))
    assert hard.verdict == "shifted" and decided_by(hard, ALPHA) == (
        "hard failure: row 3 (prompt 0) position 1: token 'x' has probability 0 under the processed target after 'hi' "
        "(+1 more)")
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


def test_effect_is_worded_from_the_kind_and_effect_fields_not_the_summary() -> None:
    tv = Effect(name="TV", unit="total variation distance", estimate=0.1234, low=0.0, high=0.2, level=0.999)
    chi2 = TestOutcome(name="chi2 prompt 0 position 0", family="two-sample", primary=True, statistic=50.0, pvalue=1e-9,
                       summary="a summary that says TV=0.9999 and (difference 7;) and mean f 1 vs expected 2 ",
                       kind=TestKind.CHI2_POSITION, effect=tv)
    assert effect(chi2) == "TV=0.1234"
    assert effect_bound(chi2) == "TV=0.1234 <= 0.2000 (confidence 1-0.001)"
    diff = Effect(name="row score difference", unit="score units per row", estimate=-0.0456, low=-0.06, high=-0.03,
                  level=0.95)
    assert effect(_test("draft ratio comparison", 1e-9, -4.87, "(difference +9.9; 10 pairs)", diff)) == (
        "Z=-4.87, candidate minus baseline row score -0.0456")
    # no effect field (a uniformity statistic, or a result written before effects were stored): the statistic
    assert effect(_test("PIT Anderson-Darling", 1e-9, 12.5)) == "statistic 12.5"
    old = dataclasses.replace(chi2, kind=None, effect=None)
    assert effect(old) == "statistic 50" and effect_bound(old) == ""


def test_no_regular_expression_reads_evidence_back_from_words() -> None:
    """The faces word evidence from data: nothing in the library parses a test's summary back with a regex."""
    import ast
    from pathlib import Path

    import speceq.verdicts.reasons as reasons_module

    root = Path(__file__).resolve().parents[2]
    checked = [Path(reasons_module.__file__), root / "harness" / "pipeline" / "analysis.py",
               root / "harness" / "verdicts" / "decide.py", *sorted((root / "reports").glob("*.py"))]
    for path in checked:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert "re" not in imported, f"{path.relative_to(root)} imports re: faces word evidence from data fields"
    # the whole tree: no regular expression (re.search(p, x) or a compiled pattern's p.search(x)) reads a summary,
    # a reason, a failure or a note
    words = {"summary", "reason", "hard_failures", "notes", "note", "failure", "failures"}
    for path in sorted(p for d in ("harness", "reports", "suites") for p in (root / d).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _REGEX_METHODS:
                read = {n.attr for a in node.args for n in ast.walk(a) if isinstance(n, ast.Attribute)}
                read |= {n.id for a in node.args for n in ast.walk(a) if isinstance(n, ast.Name)}
                assert not read & words, f"{path.relative_to(root)}:{node.lineno} reads {sorted(read & words)} with a regex"


#: Methods of re and of compiled patterns that read a string.
_REGEX_METHODS = {"search", "match", "fullmatch", "findall", "finditer", "sub", "subn"}


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


def test_failure_lines_word_every_kind_of_record_from_its_token_ids() -> None:
    prefix = tuple(b"say hi")
    outside = HardFailure(kind=FailureKind.OUTSIDE_MARGIN, prompt=1, position=2, token=ord("q"), prefix=prefix,
                          vocab_size=259, row=7, margin_nats=float("inf"), threshold_nats=0.5, rows_flagged=2,
                          baseline_rows=400)
    again = dataclasses.replace(outside, row=9, margin_nats=3.25, rows_flagged=None, baseline_rows=None)
    mismatch = HardFailure(kind=FailureKind.GREEDY_MISMATCH, prompt=0, position=3, token=ord("b"), baseline_token=ord("a"),
                           prefix=prefix, vocab_size=259, margin_nats=2.5, threshold_nats=1e-3, rows=6, total=12)
    off = HardFailure(kind=FailureKind.OFF_ARGMAX, prompt=0, position=4, token=ord("z"), prefix=prefix, vocab_size=259,
                      row=11, margin_nats=4.0, threshold_nats=1e-3)
    lines = failure_lines((outside, again, mismatch, off))
    assert lines == (
        "2 candidate row(s) hold a token outside the processed target's support beyond the numerics margin (every law "
        "whose logits are within 0.5 nats of the oracle's excludes it; the baseline's 400 rows none): row 7 (prompt 1) "
        "position 2: token 'q' after 'say hi' (no finite logit error admits it)",
        "row 9 (prompt 1) position 2: token 'q' after 'say hi' (its exclusion margin 3.25 nats)",
        "greedy rows of prompt 0 differ at position 3 where the target's top-2 margin is 2.5 nats (> 0.001): 'a' vs 'b' "
        "after 'say hi' (6 rows)",
        "... 12 distinct mismatches in all",
        "greedy row 11 of prompt 0, teacher-forced through the oracle after it left the baseline's row, emits 'z' at "
        "position 4, not the target's argmax, where the top-2 margin is 4 nats (> 0.001) after 'say hi'",
    )
    # another vocabulary: ids, never bytes
    assert failure_lines((dataclasses.replace(off, vocab_size=50_000, token=4242),))[0].endswith(
        "emits #4242 at position 4, not the target's argmax, where the top-2 margin is 4 nats (> 0.001) after "
        "'115 97 121 32 104 105'")
    import json

    for f in (outside, mismatch, off):
        assert HardFailure.from_dict(json.loads(json.dumps(dataclasses.asdict(f)))) == f


def test_the_untested_independence_note_names_the_limit_of_one_forward_batch_of_one_call() -> None:
    from speceq.verdicts.notes import Note, NoteKind
    from speceq.verdicts.reasons import note_line

    def line(**values) -> str:
        return note_line(Note(kind=NoteKind.INDEPENDENCE_UNTESTED, values={"role": "candidate"} | values))

    one = line(rows=300, calls=1, sample_calls=1, batch_size=512)
    assert one.startswith("the candidate's row independence: not tested: all 300 rows come from a single forward batch "
                          "(batch_size 512) of a single sample() call, so there is nothing independent to compare them")
    assert "every token-law test's p-value assumes they share none" in one
    both = line(rows=300, calls=1, sample_calls=1, batch_size=512, role="both")  # one note for both engines
    assert both.startswith("the candidate's and the baseline's row independence: not tested: all 300 rows of each "
                           "come from a single forward batch (batch_size 512)")
    few = line(rows=10, calls=1, sample_calls=1, batch_size=1)  # single-row batches: grouped by call, one group
    assert "all 10 rows come from one sample() call, 10 forward batches of 1 row(s)" in few
    # two calls too small to pair, and a note saved before the call count and batch size were recorded
    assert line(rows=4, calls=2, sample_calls=2, batch_size=1) == line(rows=4, calls=2) == (
        "the candidate's row independence: not tested (4 rows in 2 call(s): no pair of rows of one call to set "
        "against a pair of rows of two calls)")
