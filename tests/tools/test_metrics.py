"""The quality measurements, on hand-made logits where the answer is known."""

from __future__ import annotations

import math

import pytest
import torch

from speceq.models import VOCAB_SIZE
from tools.training.metrics import acceptance_rate, format_table, model_metrics


def test_uniform_logits_give_chance_values() -> None:
    windows = torch.randint(0, 256, (3, 10), generator=torch.Generator().manual_seed(0))
    m = model_metrics(torch.zeros(3, 10, VOCAB_SIZE), windows)
    assert m.heldout_loss == pytest.approx(math.log(VOCAB_SIZE))
    assert m.entropy == pytest.approx(math.log(VOCAB_SIZE))
    assert m.top1_prob == pytest.approx(1 / VOCAB_SIZE)
    assert m.n_tokens == 3 * 9


def test_loss_uses_the_next_token() -> None:
    windows = torch.tensor([[5, 7, 9]])
    logits = torch.full((1, 3, VOCAB_SIZE), -1e4)
    logits[0, 0, 7] = 0.0  # position 0 predicts token 7 with certainty
    logits[0, 1, 9] = 0.0
    m = model_metrics(logits, windows)
    assert m.heldout_loss == pytest.approx(0.0, abs=1e-9)
    assert m.entropy == pytest.approx(0.0, abs=1e-9)
    assert m.top1_prob == pytest.approx(1.0)


def test_acceptance_of_identical_and_disjoint_distributions() -> None:
    logits = torch.randn(4, 5, VOCAB_SIZE, generator=torch.Generator().manual_seed(1))
    assert acceptance_rate(logits, logits, 1.0) == pytest.approx(1.0, abs=1e-6)
    a = torch.full((2, VOCAB_SIZE), -1e9)
    b = a.clone()
    a[:, 1], b[:, 2] = 0.0, 0.0
    assert acceptance_rate(a, b, 0.7) == pytest.approx(0.0, abs=1e-9)


def test_acceptance_is_one_minus_total_variation() -> None:
    p = torch.tensor([0.5, 0.3, 0.2] + [0.0] * (VOCAB_SIZE - 3))
    q = torch.tensor([0.2, 0.3, 0.5] + [0.0] * (VOCAB_SIZE - 3))
    tv = 0.5 * float((p - q).abs().sum())
    assert acceptance_rate(p.log()[None], q.log()[None], 1.0) == pytest.approx(1 - tv, abs=1e-6)
    # a lower temperature sharpens both towards different tokens: less overlap
    assert acceptance_rate(p.log()[None], q.log()[None], 0.5) < 1 - tv


def test_format_table_lists_every_model_and_temperature() -> None:
    row = {"heldout_loss": 2.0, "entropy": 1.9, "top1_prob": 0.5, "n_tokens": 10}
    table = format_table({"models": {"target": row, "draft": row}, "acceptance": {"T=1": 0.8, "T=0.7": 0.75},
                          "greedy_agreement": 0.6})
    assert "target" in table and "draft" in table and "T=0.7: 0.750" in table and "0.600" in table
