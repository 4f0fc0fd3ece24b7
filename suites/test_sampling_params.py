"""Sampling parameters: top-k, top-p and both, combined with temperature.

Bug class: truncation applied to the target but not the draft (or the reverse), top-k/top-p
applied before the temperature instead of after, the residual max(0, p - q) taken over the
untruncated p (emitting tokens outside the kept set: a zero-probability token is a hard
failure naming the prefix), top-p boundary rules that keep one token too many or too few,
renormalisation forgotten after truncation.

Budget: 3,000 rows of 4 tokens per engine and case (``--speceq-samples`` overrides). The
oracle's support test fails on a single token outside the kept set; a shifted boundary of
the top-p set is detected when it moves ~2% of the mass.
"""

from __future__ import annotations

import pytest

from speceq.suites._cases import PROMPTS, byte_case

SETTINGS = {
    "top_k5-T1": dict(top_k=5, temperature=1.0),
    "top_k20-T0.7": dict(top_k=20, temperature=0.7),
    "top_p0.8-T1": dict(top_p=0.8, temperature=1.0),
    "top_p0.95-T1.3": dict(top_p=0.95, temperature=1.3),
    "top_k10-top_p0.9-T0.7": dict(top_k=10, top_p=0.9, temperature=0.7),
    "top_k40-top_p0.7-T1.3": dict(top_k=40, top_p=0.7, temperature=1.3),
}

pytestmark = pytest.mark.speceq_budget(samples=3_000)


@pytest.mark.parametrize("label", list(SETTINGS))
def test_truncation(speceq, label: str) -> None:
    speceq.check(byte_case(label, PROMPTS[0], max_new_tokens=4, **SETTINGS[label]))
