"""Draft conformance: a drafter must sample from the q it returns."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from speceq.kernels.drafts import (
    DRAFT_TEMPLATES,
    bf16_sampling_drafter,
    check_drafter,
    conforming_drafter,
    draft_logits,
    ignores_temperature_drafter,
    pit_of_rows,
    returns_raw_q_drafter,
)


def test_a_conforming_drafter_passes() -> None:
    r = check_drafter(conforming_drafter, replicates=800)
    assert r.verdict == "equivalent" and r.exit_code == 0 and len(r.tests) == len(DRAFT_TEMPLATES) == 9


@pytest.mark.parametrize("seed", [0, 1])
def test_the_bf16_drafter_is_caught_at_the_default_budget(seed: int) -> None:
    """DeepSpec#31 (tokens from bf16 logits, q in float32): found by the realistic-magnitude templates."""
    r = check_drafter(bf16_sampling_drafter, seed=seed)
    assert r.verdict == "shifted"
    assert any(t.rejected and t.template.startswith(("bf16-tie", "bf16-merge")) for t in r.tests)
    ok = check_drafter(conforming_drafter, seed=seed)
    assert ok.verdict == "equivalent"


def test_bf16_templates_straddle_and_merge_in_bfloat16() -> None:
    """bf16-tie: two tokens 0.006 nats apart that bfloat16 puts 0.25 apart; bf16-merge: 0.115 apart -> equal."""
    rng = np.random.default_rng(0)
    for family, gap_fp32, gap_bf16 in (("bf16-tie", 0.006, 0.25), ("bf16-merge", 0.115, 0.0)):
        x = draft_logits(family, 61, rng)
        top = np.sort(x)[-2:]
        low = torch.from_numpy(top).to(torch.bfloat16).to(torch.float32).numpy()
        assert abs((top[1] - top[0]) - gap_fp32) < 1e-4 and low[1] - low[0] == gap_bf16
        assert 30 < top[0] < 40 and np.sort(x)[-3] < top[0] - 2  # realistic magnitude, the tail below


@pytest.mark.parametrize("fn", [returns_raw_q_drafter, ignores_temperature_drafter])
def test_drafters_returning_another_q_are_caught(fn) -> None:
    r = check_drafter(fn, replicates=800)
    assert r.verdict == "shifted" and r.exit_code == 1
    assert r.tests and any(t.rejected for t in r.tests)


def test_pit_is_uniform_when_tokens_follow_their_rows() -> None:
    rng = np.random.default_rng(0)
    q = rng.dirichlet(np.ones(9), size=20000)
    tok = np.array([rng.choice(9, p=row) for row in q])
    u = pit_of_rows(q, tok, rng)
    hist = np.histogram(u, bins=10, range=(0, 1))[0]
    assert hist.min() > 1800 and hist.max() < 2200
