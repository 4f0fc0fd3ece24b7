"""The one verdict vocabulary: order, worst-of, exit codes, parsing, JSON."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from speceq.verdicts.verdict import EXIT_USAGE, RUN_VERDICTS, Verdict


def test_order_and_exit_codes() -> None:
    assert sorted(Verdict, key=lambda v: v.rank) == [Verdict.SHIFTED, Verdict.LOSSY, Verdict.INCONCLUSIVE,
                                                     Verdict.WITHIN_TOLERANCE, Verdict.EQUIVALENT]
    assert {v: v.exit_code for v in Verdict} == {Verdict.SHIFTED: 1, Verdict.LOSSY: 1, Verdict.INCONCLUSIVE: 3,
                                                Verdict.WITHIN_TOLERANCE: 4, Verdict.EQUIVALENT: 0}
    assert EXIT_USAGE not in {v.exit_code for v in Verdict}
    assert Verdict.LOSSY in RUN_VERDICTS  # a run of a candidate that declares itself lossy
    assert Verdict.WITHIN_TOLERANCE in RUN_VERDICTS


def test_within_tolerance_is_better_than_inconclusive_and_worse_than_equivalent() -> None:
    """A run with a case in drift and an undecided one is undecided; drift and equivalent cases make drift."""
    assert Verdict.worst(["within-tolerance", "inconclusive"]) is Verdict.INCONCLUSIVE
    assert Verdict.worst(["within-tolerance", "equivalent"]) is Verdict.WITHIN_TOLERANCE
    assert Verdict.worst(["within-tolerance", "shifted"]) is Verdict.SHIFTED


@given(st.lists(st.sampled_from([v.value for v in Verdict])))
def test_worst_is_the_lowest_rank_whatever_the_order(words: list[str]) -> None:
    worst = Verdict.worst(words)
    assert worst == Verdict.worst(reversed(words))
    assert all(worst.rank <= Verdict(w).rank for w in words)
    assert worst in words or (not words and worst == Verdict.EQUIVALENT)


def test_a_verdict_is_its_word() -> None:
    assert Verdict.SHIFTED == "shifted" and f"{Verdict.SHIFTED}" == "shifted"
    assert json.dumps({"verdict": Verdict.INCONCLUSIVE}) == '{"verdict": "inconclusive"}'
    assert Verdict.parse("lossy") is Verdict.LOSSY


def test_unknown_words_are_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match=r"unknown verdict 'fine'; expected one of \['shifted'"):
        Verdict.worst(["equivalent", "fine"])
    with pytest.raises(ValueError, match=r"expected one of \['equivalent', 'shifted', 'inconclusive', 'within-tolerance', "
                                         r"'lossy'\]"):
        Verdict.parse("conforms", allowed=RUN_VERDICTS)


def test_every_result_type_speaks_it() -> None:
    """Runs, kernel checks and drafter checks carry the same enum (no second vocabulary)."""
    import typing

    from speceq.kernels.check_result import KernelCheckResult
    from speceq.kernels.drafts import DraftCheckResult
    from speceq.verdicts.result import CaseResult, RunResult

    for cls in (RunResult, CaseResult, KernelCheckResult, DraftCheckResult):
        hints = typing.get_type_hints(cls)
        assert hints["verdict"] is Verdict, cls
