"""Remembered forwards of the hf-* engines (engines/_prefill.py): same rows bit for bit, and actually used."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.cache_utils import DynamicCache

from speceq.core.params import SamplingParams
from speceq.engines._prefill import ENV_SWITCH, PrefillMemo, remember_prefills
from speceq.engines.base import SampleRequest
from speceq.engines.hf import HFAssistedEngine, HFPromptLookupEngine, HFSampleEngine
from speceq.engines.hf_paths import HFEarlyExitEngine

torch.set_num_threads(1)

PROMPTS = ((10, 11, 12, 13, 10, 11, 12, 13, 10, 11), (40, 41, 42))


def tiny_llama(seed: int, layers: int = 2) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=259, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=128,
                      bos_token_id=None, eos_token_id=257, pad_token_id=258)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)  # peaked enough that rows share prefixes, spread enough that drafts fail
    return model


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("hf-memo")
    target, draft = root / "target", root / "draft"
    tiny_llama(0).save_pretrained(target)
    noisy = tiny_llama(0)
    with torch.no_grad():
        noisy.lm_head.weight.add_(torch.randn(noisy.lm_head.weight.shape, generator=torch.Generator().manual_seed(1)))
    noisy.save_pretrained(draft)
    return target, draft


def _engines(target: Path, draft: Path) -> dict:
    return {"hf-sample": HFSampleEngine(str(target)), "hf-assisted": HFAssistedEngine(str(target), str(draft)),
            "hf-prompt-lookup": HFPromptLookupEngine(str(target)),
            "hf-early-exit": HFEarlyExitEngine(str(target), exit_layer=1, num_assistant_tokens=3)}


@pytest.mark.parametrize("batch_size", [1, 2])
def test_rows_identical_with_and_without_the_memo(folders: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
                                                  batch_size: int) -> None:
    params = SamplingParams(temperature=1.0, max_new_tokens=6)
    request = SampleRequest(prompts=PROMPTS, params=params, n=12, seed=5, batch_size=batch_size)
    monkeypatch.setenv(ENV_SWITCH, "0")
    plain = {name: e.sample(request) for name, e in _engines(*folders).items()}
    monkeypatch.setenv(ENV_SWITCH, "1")
    remembering = _engines(*folders)
    for name, engine in remembering.items():
        got = engine.sample(request)
        np.testing.assert_array_equal(got.tokens, plain[name].tokens, err_msg=name)
        np.testing.assert_array_equal(got.lengths, plain[name].lengths, err_msg=name)
        assert got.accepted_tokens == plain[name].accepted_tokens, name
        memo = engine.target._speceq_prefill_memo
        assert memo.hits > 0, f"{name}: the memo answered no forward"
    assisted = remembering["hf-assisted"]
    assert assisted.draft._speceq_prefill_memo.hits > 0
    assert 0 < assisted.sample(request).accepted_tokens < assisted.sample(request).drafted_tokens  # crops happened


def test_switched_off_leaves_forward_alone(folders: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_SWITCH, "0")
    engine = HFSampleEngine(str(folders[0]))
    assert getattr(engine.target, "_speceq_prefill_memo", None) is None
    assert "forward" not in vars(engine.target)


def test_paths_not_checked_with_the_memo_leave_the_forward_alone(folders: tuple[Path, Path]) -> None:
    from speceq.engines.hf_paths import HFMTPEngine, HFUniversalEngine

    assert HFUniversalEngine._remember_forwards is False and HFMTPEngine._remember_forwards is False
    assert HFEarlyExitEngine._remember_forwards is True


def test_a_model_object_given_by_the_caller_is_not_wrapped() -> None:
    model = tiny_llama(0)
    HFSampleEngine(model)
    assert "forward" not in vars(model)


def test_key_holds_the_config_early_exit_forward_is_not_answered_with_the_full_one() -> None:
    model = tiny_llama(3, layers=2)
    reference = tiny_llama(3, layers=2)
    memo = remember_prefills(model)
    assert isinstance(memo, PrefillMemo)
    ids = torch.tensor([PROMPTS[0]])
    with torch.inference_mode():
        full = model(input_ids=ids, cache=DynamicCache(config=model.config)).logits
        model.config.num_hidden_layers = reference.config.num_hidden_layers = 1
        short = model(input_ids=ids, cache=DynamicCache(config=model.config)).logits
        expected = reference(input_ids=ids, cache=DynamicCache(config=reference.config)).logits
        model.config.num_hidden_layers = 2
        again = model(input_ids=ids, cache=DynamicCache(config=model.config)).logits
    assert torch.equal(short, expected) and not torch.equal(short, full)
    assert torch.equal(again, full) and memo.hits == 1


def test_bundled_byte_world_assisted_rows_identical_to_the_unremembered_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """hf-assisted and hf-sample on the bundled byte target and draft, one row per call: the rows, lengths and
    acceptance counts with remembered forwards equal those of the plain path (SPECEQ_HF_PREFILL_MEMO=0) bit for
    bit, and the memo did answer forwards of both models (draft prefills, repeated steps, crops)."""
    from speceq.models import ByteTokenizer
    from speceq.models.prompts import DEFAULT_PROMPTS

    prompts = tuple(tuple(ByteTokenizer().encode(DEFAULT_PROMPTS[i])) for i in (0, 4))
    params = SamplingParams(temperature=1.0, max_new_tokens=6)
    request = SampleRequest(prompts=prompts, params=params, n=16, seed=3, batch_size=1)
    makers = {"hf-assisted": lambda: HFAssistedEngine(), "hf-sample": lambda: HFSampleEngine()}
    engines = {}
    for name, make in makers.items():
        monkeypatch.setenv(ENV_SWITCH, "0")
        plain = make().sample(request)
        monkeypatch.setenv(ENV_SWITCH, "1")
        engines[name] = engine = make()
        got = engine.sample(request)
        np.testing.assert_array_equal(got.tokens, plain.tokens, err_msg=name)
        np.testing.assert_array_equal(got.lengths, plain.lengths, err_msg=name)
        assert (got.drafted_tokens, got.accepted_tokens, got.verify_steps) == (
            plain.drafted_tokens, plain.accepted_tokens, plain.verify_steps), name
    sample_memo = engines["hf-sample"].target._speceq_prefill_memo
    assert sample_memo.hits > 0 and sample_memo.misses > 0  # prefills and repeated steps; rows still diverge
    assisted = engines["hf-assisted"]
    assert assisted.draft._speceq_prefill_memo.hits > 0  # the draft's prompt prefill, remembered across rows
    again = assisted.sample(request)
    assert 0 < again.accepted_tokens < again.drafted_tokens  # rejections happened, so the caches were cropped


def test_weight_addresses_are_the_parameters_and_a_replaced_head_is_not_answered_from_memory() -> None:
    """The memo's key holds the identity of every weight tensor (read by a plain walk of the modules): a model
    whose head gets a new weight tensor is computed again, and gives what a fresh model with that head gives."""
    from speceq.engines._prefill import _weight_addresses

    model, reference = tiny_llama(4), tiny_llama(4)
    addresses = _weight_addresses(model)
    assert set(addresses) == {p.data_ptr() for p in model.parameters()}
    assert len(addresses) >= len(list(model.parameters()))
    memo = remember_prefills(model)
    assert isinstance(memo, PrefillMemo)
    ids = torch.tensor([PROMPTS[0]])
    with torch.inference_mode():
        first = model(input_ids=ids, cache=DynamicCache(config=model.config)).logits
        new_head = torch.nn.Parameter(model.lm_head.weight.detach().clone() * -1.0)
        model.lm_head.weight = new_head
        reference.lm_head.weight = torch.nn.Parameter(new_head.detach().clone())
        second = model(input_ids=ids, cache=DynamicCache(config=model.config)).logits
        expected = reference(input_ids=ids, cache=DynamicCache(config=reference.config)).logits
    assert memo.hits == 0 and memo.misses == 2
    assert torch.equal(second, expected) and not torch.equal(second, first)
