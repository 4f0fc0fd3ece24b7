"""Long continuations (64 tokens) and EOS handling.

Bug class: state that drifts over many draft/verify rounds (KV-cache rollback off by one,
position ids that lag after rejections, a draft cache that is not rolled back), EOS inside an
accepted draft block (tokens emitted after EOS, EOS dropped, the row's length miscounted),
``ignore_eos`` not masking EOS in the draft or in the residual, ``max_new_tokens``
overshoot by the bonus token. Contract violations (a token after EOS, EOS under
``ignore_eos``, a row stopped early without EOS, too many tokens) fail at once; distribution
errors are found by the oracle tests over every generated token and by the length test.

The bundled target rarely emits EOS (about 1-5% of rows end early within 64 tokens at
T = 1.3), so the length test has little power; the contract checks are exact.

Budgets (samples per engine; ``--speceq-samples`` overrides): 400 rows of 64 tokens for
each single-prompt test (25,600 candidate tokens scored), 200 per prompt in ragged batches
of 8 with EOS (4 prompts).
"""

from __future__ import annotations

import pytest

from speceq.suites._cases import PROMPTS, byte_case


@pytest.mark.speceq_budget(samples=400)
def test_long_continuation_ignore_eos(speceq) -> None:
    speceq.check(byte_case("long-64-ignore-eos", PROMPTS[8], temperature=1.0, max_new_tokens=64, ignore_eos=True))


@pytest.mark.speceq_budget(samples=400)
def test_long_continuation_with_eos(speceq) -> None:
    speceq.check(byte_case("long-64-eos", PROMPTS[10], temperature=1.3, max_new_tokens=64))


@pytest.mark.speceq_budget(samples=200)
def test_eos_in_ragged_batch(speceq) -> None:
    speceq.check(byte_case("long-64-eos-batch-8", PROMPTS[10], batch_size=8,
                           companions=(PROMPTS[0], PROMPTS[2], PROMPTS[6]), temperature=1.3, max_new_tokens=64))
