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


def _path(model: LlamaForCausalLM, steps: list) -> torch.Tensor:
    """Run ``steps`` on one fresh cache: a list of token lists (a forward each) and ("crop", n) rollbacks;
    return the last forward's logits."""
    cache = DynamicCache(config=model.config)
    logits = None
    with torch.inference_mode():
        for step in steps:
            if step[0] == "crop":
                cache.crop(step[1] - cache.get_seq_length())
            elif step[0] == "unseen":  # a forward the memo passes through (hidden states asked for)
                model(input_ids=torch.tensor([step[1]]), cache=cache, output_hidden_states=True)
            else:
                logits = model(input_ids=torch.tensor([step]), cache=cache).logits
    assert logits is not None
    return logits


def test_a_crop_back_to_a_forward_boundary_forgets_the_rejected_drafts() -> None:
    """Two rows draft different tokens one at a time, roll them back to the prompt and go on with the same
    token: the second row's step is answered from memory, and equals the step of a row that never drafted."""
    model, reference = tiny_llama(5), tiny_llama(5)
    memo = remember_prefills(model)
    assert isinstance(memo, PrefillMemo)
    prompt = list(PROMPTS[0])
    rows = [[prompt, [20], [21], ("crop", len(prompt)), [7]], [prompt, [30], [31], ("crop", len(prompt)), [7]]]
    got = [_path(model, steps) for steps in rows]
    never_drafted = _path(reference, [prompt, [7]])
    assert torch.equal(got[0], never_drafted) and torch.equal(got[1], never_drafted)
    assert memo.hits == 2 and memo.misses == 6  # row 2: the prefill and the step after the crop remembered


def test_a_forward_cut_through_its_middle_is_named_by_its_whole_input() -> None:
    """A crop inside a forward over several tokens keeps positions that forward computed together with the
    dropped ones: rows whose cut forward differed are not answered from each other; equal ones are."""
    model, reference = tiny_llama(6), tiny_llama(6)
    memo = remember_prefills(model)
    assert isinstance(memo, PrefillMemo)
    prompt = list(PROMPTS[0])
    keep = len(prompt) + 1
    paths = [[[*prompt, 20, 21], ("crop", keep), [7]], [[*prompt, 20, 22], ("crop", keep), [7]]]
    for steps in paths:
        assert torch.equal(_path(model, steps), _path(reference, steps))
    assert memo.hits == 0 and memo.misses == 4
    assert torch.equal(_path(model, paths[0]), _path(reference, paths[0])) and memo.hits == 2


def test_a_forward_the_memo_did_not_see_makes_its_cache_unknown() -> None:
    """After a crop and a forward the memo passed through, the cache's length says nothing about its
    history: the next step is computed, not answered with a row that cropped to the same length."""
    model, reference = tiny_llama(7), tiny_llama(7)
    memo = remember_prefills(model)
    assert isinstance(memo, PrefillMemo)
    prompt = list(PROMPTS[0])
    plain = [prompt, ("crop", len(prompt) - 1), [7]]
    unseen = [prompt, ("crop", len(prompt) - 2), ("unseen", [99]), [7]]
    assert torch.equal(_path(model, plain), _path(reference, plain))
    got = _path(model, unseen)
    assert torch.equal(got, _path(reference, unseen))
    assert not torch.equal(got, _path(reference, plain))


def test_a_cache_rewritten_outside_a_forward_is_unknown() -> None:
    """A cache whose tensors were replaced without a forward (here its batch repeated) is not answered from
    memory, even where its length is the one recorded: the step after it is computed, and is right."""
    model, reference = tiny_llama(8), tiny_llama(8)
    memo = remember_prefills(model)
    assert isinstance(memo, PrefillMemo)
    prompt = list(PROMPTS[0])

    def path(m: LlamaForCausalLM) -> torch.Tensor:
        cache = DynamicCache(config=m.config)
        with torch.inference_mode():
            m(input_ids=torch.tensor([prompt]), cache=cache)
            cache.batch_repeat_interleave(2)
            return m(input_ids=torch.tensor([[7], [8]]), cache=cache).logits

    expected = path(reference)
    assert torch.equal(path(model), expected) and torch.equal(path(model), expected)
    assert memo.hits == 1 and memo.misses == 1  # the second prefill remembered; the steps computed, not kept
