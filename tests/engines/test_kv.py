"""SlotCache (ragged rows in one KV cache) and the small torch helpers."""

from __future__ import annotations

import inspect

import pytest
import torch

from speceq.engines._kv import SlotCache
from speceq.errors import ConfigError
from speceq.models.torch_utils import batch_generator, cache_kwarg, configure_threads, derive_seed, resolve_dtype


def last_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids])).logits[0, -1]


def test_masked_slots_are_invisible_and_positions_skip_them(target) -> None:
    slots = SlotCache(target, 2, "cpu")
    ids = torch.tensor([[5, 6, 7], [0, 0, 9]])
    valid = torch.tensor([[True, True, True], [False, False, True]])
    with torch.inference_mode():
        slots.forward(ids, valid)
        assert slots.left_pad.tolist() == [0, 2] and slots.next_positions.tolist() == [3, 1]
        # row 0 appends two drafts; row 1 appends a dummy slot then a real token
        new_valid = torch.tensor([[True, True], [False, True]])
        assert slots.positions_for(new_valid).tolist() == [[3, 4], [1, 1]]
        logits = slots.forward(torch.tensor([[8, 10], [0, 11]]), new_valid)
    torch.testing.assert_close(logits[0, -1], last_logits(target, [5, 6, 7, 8, 10]), atol=1e-5, rtol=0)
    torch.testing.assert_close(logits[1, -1], last_logits(target, [9, 11]), atol=1e-5, rtol=0)
    # roll back row 0's last draft: its next token must see only 5 6 7 8
    slots.keep_last(torch.tensor([[True, False], [True, True]]))
    with torch.inference_mode():
        logits = slots.forward(torch.tensor([[12], [13]]), torch.ones((2, 1), dtype=torch.bool))
    torch.testing.assert_close(logits[0, -1], last_logits(target, [5, 6, 7, 8, 12]), atol=1e-5, rtol=0)
    torch.testing.assert_close(logits[1, -1], last_logits(target, [9, 11, 13]), atol=1e-5, rtol=0)


def test_trailing_unused_columns_are_cropped_and_rows_selected(target) -> None:
    slots = SlotCache(target, 2, "cpu")
    with torch.inference_mode():
        slots.forward(torch.tensor([[1, 2], [3, 4]]), torch.ones((2, 2), dtype=torch.bool))
        slots.forward(torch.tensor([[5, 6], [7, 8]]), torch.ones((2, 2), dtype=torch.bool))
    slots.keep_last(torch.tensor([[True, False], [False, False]]))
    assert slots.columns == 3 and slots.cache.get_seq_length() == 3
    slots.select_rows(torch.tensor([1]))
    assert slots.rows == 1 and slots.columns == 2 and slots.cache.get_seq_length() == 2


def test_prefill_shares_distinct_prompts(target) -> None:
    slots = SlotCache(target, 3, "cpu")
    ids = torch.tensor([[0, 1, 2], [4, 5, 6]])
    valid = torch.tensor([[False, True, True], [True, True, True]])
    with torch.inference_mode():
        logits = slots.prefill(ids, valid, torch.tensor([1, 0, 1]), last_only=True)
    assert logits.shape == (3, 1, 259) and slots.rows == 3 and slots.left_pad.tolist() == [0, 1, 0]
    torch.testing.assert_close(logits[1, -1], last_logits(target, [1, 2]), atol=1e-5, rtol=0)
    torch.testing.assert_close(logits[2, -1], last_logits(target, [4, 5, 6]), atol=1e-5, rtol=0)


def test_configure_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("SPECEQ_TORCH_THREADS", raising=False)
    try:
        assert configure_threads(2) == 2 and torch.get_num_threads() == 2
        assert configure_threads(None) == 1 and torch.get_num_threads() == 1
        monkeypatch.setenv("SPECEQ_TORCH_THREADS", "2")
        assert configure_threads(None) == 2
        monkeypatch.setenv("SPECEQ_TORCH_THREADS", "many")
        with pytest.raises(ConfigError, match="SPECEQ_TORCH_THREADS"):
            configure_threads(None)
        with pytest.raises(ConfigError, match="threads"):
            configure_threads(0)
    finally:
        torch.set_num_threads(1)


def test_seeds_generators_and_names(target) -> None:
    assert derive_seed(1, 2) == derive_seed(1, 2) != derive_seed(2, 1)
    a = torch.rand(4, generator=batch_generator(3, 0))
    assert torch.equal(a, torch.rand(4, generator=batch_generator(3, 0)))
    assert not torch.equal(a, torch.rand(4, generator=batch_generator(3, 1)))
    with pytest.raises(ConfigError, match="seed"):
        derive_seed(-1)
    assert resolve_dtype("bf16") == torch.bfloat16
    # releases that take `cache=` (5.24 deprecates past_key_values=) get it; older ones keep the old name
    takes_cache = "cache" in inspect.signature(target.forward).parameters
    assert cache_kwarg(target) == ("cache" if takes_cache else "past_key_values")
