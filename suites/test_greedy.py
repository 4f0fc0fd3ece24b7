"""Greedy (temperature 0): exact equality with the target's argmax sequence, with near-tie forensics.

Bug class: draft tokens emitted without verification at T = 0, an off-by-one in the accepted
prefix, the bonus token taken from the draft, argmax computed on differently processed
logits. A correct engine reproduces the baseline's rows token for token; each first
divergence is classified with the target's top-2 log-probability margin at that prefix: a
numerical near-tie (margin <= 1e-3 nats, batched kernels may flip it: reported, not a
failure) or a real mismatch (a hard failure). Without the oracle a divergence cannot be
classified and the case is inconclusive.

Budget: 4 rows per prompt and engine, fixed (``--speceq-samples`` does not change it:
greedy rows are deterministic, more rows only repeat them), 32 tokens, every default prompt
alone and four prompts in ragged batches of 8.
"""

from __future__ import annotations

from speceq.suites._cases import PROMPTS, byte_case

#: Rows per prompt and engine (passed to check(): a keyword beats --speceq-samples).
GREEDY_ROWS = 4


def test_greedy_alone(speceq) -> None:
    cases = [byte_case(f"greedy-{i}", p, batch_size=1, temperature=0.0, max_new_tokens=32)
             for i, p in enumerate(PROMPTS)]
    speceq.check(cases, samples=GREEDY_ROWS)


def test_greedy_in_ragged_batch(speceq) -> None:
    companions = (PROMPTS[0], PROMPTS[10], PROMPTS[4])
    cases = [byte_case(f"greedy-batch-{i}", PROMPTS[i], batch_size=8, companions=companions, temperature=0.0,
                       max_new_tokens=32) for i in (2, 5, 7, 9)]
    speceq.check(cases, samples=GREEDY_ROWS)
