"""Temperature: the first token and every position at T = 0.3, 0.7, 1.0, 1.3.

Bug class: temperature applied to one side only (target scaled, draft not, or the reverse),
acceptance ratios computed on unscaled probabilities, a residual built from unscaled p or q,
a bonus token drawn at T = 1. At T = 1 many of these cancel, so each test runs four
temperatures; T = 0.3 makes a leak of the draft's or of the argmax's mass obvious, T = 1.3
exposes tail handling.

Budgets (samples per engine; ``--speceq-samples`` overrides): first token 20,000 rows of one
token each, enough to certify TV < 0.05 against the oracle's exact law at every temperature
(measured with the bundled reference engine: at 10,000 rows T = 1.3 stayed inconclusive with
a TV bound of 0.0506; the analysis asked for ~19,900); every position 3,000 rows of 8 tokens,
which the oracle tests score token by token (24,000 tokens) but which certify the
per-position TV only at ~20,000 rows (so these tests usually end inconclusive: skipped).
"""

from __future__ import annotations

import pytest

from speceq.suites._cases import PROMPTS, byte_case

TEMPERATURES = (0.3, 0.7, 1.0, 1.3)


@pytest.mark.speceq_budget(samples=20_000)
@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_first_token(speceq, temperature: float) -> None:
    speceq.check(byte_case(f"first-token-T{temperature:g}", PROMPTS[1], temperature=temperature, max_new_tokens=1))


@pytest.mark.speceq_budget(samples=3_000)
@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_every_position(speceq, temperature: float) -> None:
    speceq.check(byte_case(f"positions-T{temperature:g}", PROMPTS[3], temperature=temperature, max_new_tokens=8))
