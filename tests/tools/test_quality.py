"""The trained models are measurably better than chance, and the draft is a useful, distinct proposer.

Every number here is measured from the packaged weights on held-out text, not read from
metrics.json.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from speceq.models import METRICS_PATH, VOCAB_SIZE
from tools.training.data import load_corpus
from tools.training.metrics import acceptance_rate, model_metrics, next_token_logits

SLICE_WINDOWS, SLICE_LEN = 8, 128


@pytest.fixture(scope="module")
def heldout_slice() -> torch.Tensor:
    from tools.training.data import fixed_windows

    return fixed_windows(load_corpus().heldout, SLICE_WINDOWS, SLICE_LEN)


@pytest.fixture(scope="module")
def logits(target, draft, heldout_slice):  # noqa: ANN001, ANN201
    return next_token_logits(target, heldout_slice), next_token_logits(draft, heldout_slice)


def test_target_beats_chance_on_heldout_text(logits, heldout_slice) -> None:  # noqa: ANN001
    m = model_metrics(logits[0], heldout_slice)
    assert m.heldout_loss < 3.0, f"held-out loss {m.heldout_loss:.3f} nats/token; uniform is {math.log(VOCAB_SIZE):.3f}"
    assert 0.8 < m.entropy < 3.0, f"mean next-token entropy {m.entropy:.3f} nats"
    assert m.top1_prob > 0.3


def test_draft_is_weaker_than_target_but_trained(logits, heldout_slice) -> None:  # noqa: ANN001
    target_m, draft_m = (model_metrics(x, heldout_slice) for x in logits)
    assert draft_m.heldout_loss < 3.5
    assert draft_m.heldout_loss > target_m.heldout_loss


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_draft_target_acceptance(logits, temperature: float) -> None:  # noqa: ANN001
    rate = acceptance_rate(*logits, temperature)
    # high enough for speculation to be exercised, low enough that draft errors are visible
    assert 0.6 < rate < 0.97, f"acceptance {rate:.3f} at T={temperature}"


def test_metrics_file_describes_these_models(target, draft) -> None:  # noqa: ANN001
    metrics = json.loads(METRICS_PATH.read_text(encoding="utf-8"))
    assert metrics["params"] == {"target": sum(p.numel() for p in target.parameters()),
                                 "draft": sum(p.numel() for p in draft.parameters())}
    assert metrics["training"]["draft_method"].startswith("distilled")
    assert metrics["models"]["target"]["heldout_loss"] < metrics["models"]["random_init_target"]["heldout_loss"]
    assert set(metrics["acceptance"]) == {"T=1", "T=0.7"}
