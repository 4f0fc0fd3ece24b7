"""The lean forward gives transformers' logits bit for bit, with and without a KV cache."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import DynamicCache

from speceq.models.fast_forward import FAST_FORWARD_ENV, FastLlama, fast_forward_enabled, fast_model, supports
from speceq.models.hf_utils import tiny_random_llama


def _models(target, draft) -> dict[str, torch.nn.Module]:
    # the bundled target and draft, a grouped-query (4 heads, 2 KV heads) random Llama, and one shaped
    # like SmolLM2-135M (3 query heads per KV head, head dim 64, embeddings tied to the head)
    smollm_like = tiny_random_llama(0, hidden_size=192, heads=3, kv_heads=1, init_std=0.5, tie_word_embeddings=True)
    return {"target": target, "draft": draft, "gqa": tiny_random_llama(0, init_std=0.5), "smollm-like": smollm_like}


def _assert_same(fast_logits: torch.Tensor, hf_logits: torch.Tensor) -> None:
    assert torch.equal(fast_logits, hf_logits)
    # the contract the oracle relies on, stated on its own: log-probabilities within 1e-5
    gap = (torch.log_softmax(fast_logits.double(), -1) - torch.log_softmax(hf_logits.double(), -1)).abs().max()
    assert float(gap) <= 1e-5


@pytest.mark.parametrize("name", ["target", "draft", "gqa", "smollm-like"])
def test_uncached_forward_is_bit_identical(target, draft, name: str) -> None:
    model = _models(target, draft)[name]
    fast = fast_model(model)
    assert fast is not None
    gen = torch.Generator().manual_seed(1)
    with torch.inference_mode():
        for trial in range(12):
            rows, width = int(torch.randint(1, 33, (1,), generator=gen)), int(torch.randint(1, 25, (1,), generator=gen))
            ids = torch.randint(0, 259, (rows, width), generator=gen)
            mask = None
            if trial % 2:  # right padding, as the oracle batches rows
                lengths = torch.randint(1, width + 1, (rows,), generator=gen)
                mask = (torch.arange(width)[None, :] < lengths[:, None]).long()
            _assert_same(fast(ids, mask), model(input_ids=ids, attention_mask=mask).logits)


@pytest.mark.parametrize("name", ["target", "draft", "gqa", "smollm-like"])
def test_cached_ragged_steps_are_bit_identical(target, draft, name: str) -> None:
    """Left padding, dummy slots, explicit positions, multi-token steps, crop and row selection."""
    model = _models(target, draft)[name]
    fast = fast_model(model)
    gen = torch.Generator().manual_seed(2)
    with torch.inference_mode():
        for _ in range(4):
            rows = int(torch.randint(2, 17, (1,), generator=gen))
            hf_cache, fast_cache = DynamicCache(config=model.config), fast.new_cache()
            valid = torch.zeros((rows, 0), dtype=torch.bool)
            for step in range(5):
                width = int(torch.randint(3, 9, (1,), generator=gen)) if step == 0 else step % 3 + 1
                ids = torch.randint(0, 259, (rows, width), generator=gen)
                new = torch.rand(rows, width, generator=gen) > 0.25
                new[:, -1] = True
                positions = valid.sum(1)[:, None] + torch.cumsum(new.long(), 1) - new.long()
                valid = torch.cat([valid, new], 1)
                mask = None if bool(valid.all()) else valid.long()
                keep = 1 if step % 2 else 0
                _assert_same(fast(ids, mask, positions, fast_cache, logits_to_keep=keep),
                             model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=hf_cache,
                                   use_cache=True, logits_to_keep=keep).logits)
                if step == 2:  # roll back one slot, then drop every other row
                    hf_cache.crop(-1)
                    fast_cache.crop(-1)
                    valid = valid[:, :-1]
                    index = torch.arange(0, rows, 2)
                    hf_cache.batch_select_indices(index)
                    fast_cache.batch_select_indices(index)
                    valid, rows = valid[index], len(index)
                assert fast_cache.get_seq_length() == hf_cache.get_seq_length()


def test_unsupported_models_fall_back(target) -> None:
    eager = tiny_random_llama(0)
    eager.config._attn_implementation = "eager"
    hooked = copy.deepcopy(target)
    hooked.model.layers[0].mlp.register_forward_hook(lambda *a: None)
    training = tiny_random_llama(0).train()
    for model in (eager, hooked, training, torch.nn.Linear(2, 2)):
        assert not supports(model) and fast_model(model) is None


def test_switches_turn_it_off(target, monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(fast_model(target), FastLlama)
    with fast_forward_enabled(False):
        assert fast_model(target) is None
    monkeypatch.setenv(FAST_FORWARD_ENV, "0")
    assert fast_model(target) is None
    with fast_forward_enabled(True):
        assert fast_model(target) is not None


def test_replaced_weights_rebuild_the_fast_path() -> None:
    model = tiny_random_llama(0)
    first = fast_model(model)
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone() * 2, requires_grad=False)
    second = fast_model(model)
    assert second is not None and second is not first
    ids = torch.tensor([[1, 2, 3]])
    with torch.inference_mode():
        assert torch.equal(second(ids), model(input_ids=ids).logits)
