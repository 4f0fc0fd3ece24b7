"""Batch invariance: batch sizes 1, 2 and 8 with prompts of different lengths; a prompt alone vs in a batch.

Bug class: left-padding and attention-mask errors, position ids counted from the padded
start, KV-cache rollback applied to the wrong rows after ragged acceptance (rows of one
batch accept different numbers of draft tokens), one row's accepted count or random draw
used for another, finished rows that keep influencing the batch. These bugs vanish at
batch size 1 or when every row has the same prompt, so the batched cases mix the case's
prompt with companions of other lengths (4 to 52 bytes) and every prompt is tested.

Tests and budgets (samples of each prompt per engine; ``--speceq-samples`` overrides):
``test_batch_size[1]`` 600 (each row sampled alone: slow); ``[2]`` and ``[8]`` 1,000
(2 and 4 prompts per batch layout). ``test_alone_vs_in_batch`` compares the candidate with
itself: every prompt sampled alone (baseline side, one row per batch) against the same
prompts sharing batches of 8 (candidate side, also scored by the oracle); 300 samples.
"""

from __future__ import annotations

import pytest

from speceq.suites._cases import PROMPTS, byte_case

#: Companions of the case prompt, by batch size: other lengths, so batches are ragged.
COMPANIONS = {1: (), 2: (PROMPTS[10],), 8: (PROMPTS[0], PROMPTS[8], PROMPTS[4])}
BUDGETS = {1: 600, 2: 1_000, 8: 1_000}


@pytest.mark.parametrize(
    "batch_size", [pytest.param(b, marks=pytest.mark.speceq_budget(samples=n), id=str(b)) for b, n in BUDGETS.items()]
)
def test_batch_size(speceq, batch_size: int) -> None:
    case = byte_case(f"batch-{batch_size}", PROMPTS[7], batch_size=batch_size, companions=COMPANIONS[batch_size],
                     temperature=1.0, max_new_tokens=8)
    speceq.check(case)


@pytest.mark.speceq_budget(samples=300)
def test_alone_vs_in_batch(speceq) -> None:
    case = byte_case("alone-vs-batch-8", PROMPTS[7], batch_size=8, companions=COMPANIONS[8],
                     temperature=1.0, max_new_tokens=8)
    speceq.check(case, baseline=speceq.solo())
