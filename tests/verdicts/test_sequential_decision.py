"""The sequential decision of one look (speceq.verdicts.sequential.decide_look) reads records, not words."""

from __future__ import annotations

from speceq.verdicts.evidence import SequentialEvidence, SequentialTestEvidence
from speceq.verdicts.failures import FailureKind, HardFailure
from speceq.verdicts.reasons import failure_lines
from speceq.verdicts.sequential import decide_look

LEAK = HardFailure(kind=FailureKind.OUTSIDE_MARGIN, prompt=0, position=1, token=104, prefix=(72, 105), vocab_size=259,
                   row=4, margin_nats=float("inf"), threshold_nats=0.5, rows_flagged=2, baseline_rows=40)


def _look(**kw) -> SequentialEvidence:
    quiet = SequentialTestEvidence(name="seq pair length", max_evalue=3.0, pvalue=1 / 3)
    return SequentialEvidence(**{"n": 40, "look": 7, "looks": 20, "budget": 3000, "tests": (quiet,), **kw})


def test_a_hard_failure_record_decides_the_look_and_is_worded_with_its_token() -> None:
    verdict, reason = decide_look(_look(hard_failures=(LEAK,)), tolerance=0.15, threshold=1e4)
    assert verdict == "shifted"
    assert reason == f"sequential: decided at n = 40 samples per engine after 7 looks; hard failure: {failure_lines((LEAK,))[0]}"
    assert "2 candidate row(s) hold a token outside the processed target's support" in reason
    assert "token 'h' after 'Hi'" in reason and "no finite logit error admits it" in reason


def test_an_open_look_without_failures_stays_open() -> None:
    assert decide_look(_look(), tolerance=0.15, threshold=1e4) == (None, "")
