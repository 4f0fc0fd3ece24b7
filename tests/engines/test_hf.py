"""The transformers engines on tiny random Llama models: contract, seeds, EOS, counts, processing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

from speceq.core.params import SamplingParams
from speceq.core.processing import process_logits
from speceq.engines.base import SampleRequest, validate_batch
from speceq.engines.hf import (
    HFAssistedEngine,
    HFPromptLookupEngine,
    HFSampleEngine,
    generation_kwargs,
)
from speceq.errors import ConfigError

torch.set_num_threads(1)

VOCAB, EOS, PAD = 259, 257, 258
PROMPTS = ((10, 11, 12, 13, 10, 11, 12, 13, 10, 11), (40, 41, 42))


def tiny_llama(layers: int, hidden: int, *, vocab: int = VOCAB, eos: int = EOS, pad: int = PAD, seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=128,
        bos_token_id=None,
        eos_token_id=eos,
        pad_token_id=pad,
    )
    model = LlamaForCausalLM(cfg).eval()
    # Random init is near uniform; sharpen the output so top-k/top-p and acceptance are exercised.
    with torch.no_grad():
        model.lm_head.weight.mul_(40.0)
    return model


@pytest.fixture(scope="module")
def target() -> LlamaForCausalLM:
    return tiny_llama(2, 32, seed=0)


@pytest.fixture(scope="module")
def draft() -> LlamaForCausalLM:
    """The target with a perturbed output layer: close enough for drafts to be accepted often."""
    model = tiny_llama(2, 32, seed=0)
    with torch.no_grad():
        model.lm_head.weight.add_(torch.randn(model.lm_head.weight.shape, generator=torch.Generator().manual_seed(1)) * 2.0)
    return model


@pytest.fixture(scope="module")
def engines(target: LlamaForCausalLM, draft: LlamaForCausalLM) -> list:
    return [HFSampleEngine(target), HFAssistedEngine(target, draft), HFPromptLookupEngine(target)]


def request(params: SamplingParams, *, seed: int = 7, n: int = 3, batch_size: int = 4) -> SampleRequest:
    return SampleRequest(prompts=PROMPTS, params=params, n=n, seed=seed, batch_size=batch_size)


def test_valid_batches_reproducible_per_seed(engines: list) -> None:
    req = request(SamplingParams(temperature=0.9, top_k=40, top_p=0.95, max_new_tokens=6, ignore_eos=True))
    for engine in engines:
        batch = engine.sample(req)
        validate_batch(batch, req, engine)
        assert batch.tokens.shape == (6, 6)
        again = engine.sample(req)
        np.testing.assert_array_equal(batch.tokens, again.tokens, err_msg=engine.name)
        other = engine.sample(request(req.params, seed=8))
        assert not np.array_equal(batch.tokens, other.tokens), engine.name
        # rows are not all copies of each other within a request
        assert len({tuple(r) for r in batch.tokens.tolist()}) > 2, engine.name


def test_global_rng_untouched(engines: list) -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    engines[0].sample(request(SamplingParams(max_new_tokens=3)))
    assert torch.equal(torch.rand(3), expected)


def test_speculative_counts_add_up(engines: list) -> None:
    req = request(SamplingParams(temperature=1.0, max_new_tokens=8, ignore_eos=True))
    for engine in engines[1:]:
        batch = engine.sample(req)
        validate_batch(batch, req, engine)
        assert batch.info["batch_size"] == 1 and batch.info["requested_batch_size"] == 4
        assert "batch size 1" in engine.describe()["limitation"]
        assert batch.drafted_tokens is not None and batch.accepted_tokens is not None and batch.verify_steps
        assert 0 <= batch.accepted_tokens <= batch.drafted_tokens
        # each verify step emits its accepted drafts plus one target token
        assert int(batch.lengths.sum()) == batch.accepted_tokens + batch.verify_steps, engine.name
    assisted = engines[1].sample(req)
    assert assisted.drafted_tokens >= assisted.verify_steps  # k drafts per step, fewer only at the end
    assert assisted.accepted_tokens > 0


def test_left_padding_does_not_change_rows(target: LlamaForCausalLM) -> None:
    engine = HFSampleEngine(target)
    params = SamplingParams(temperature=0.0, max_new_tokens=5, ignore_eos=True)
    batched = engine.sample(request(params, n=1, batch_size=2))
    alone = engine.sample(request(params, n=1, batch_size=1))
    np.testing.assert_array_equal(batched.tokens, alone.tokens)


def test_greedy_is_argmax_and_equal_across_engines(engines: list) -> None:
    req = request(SamplingParams(temperature=0.0, max_new_tokens=5, ignore_eos=True), n=2)
    outs = [e.sample(req).tokens for e in engines]
    for o in outs[1:]:
        np.testing.assert_array_equal(outs[0], o)
    assert np.array_equal(outs[0][0], outs[0][2])  # greedy: every sample of a prompt is the same


def test_ignore_eos_honoured() -> None:
    # a 12-token vocabulary: EOS (11) has probability ~1/12 per step, so rows without
    # ignore_eos end early under this seed, and never with it
    small = tiny_llama(1, 16, vocab=12, eos=11, pad=11, seed=3)
    with torch.no_grad():
        small.lm_head.weight.div_(40.0)
    prompts = ((1, 2, 3), (4, 5))
    for engine in (HFSampleEngine(small), HFAssistedEngine(small, small), HFPromptLookupEngine(small)):
        free = SampleRequest(prompts=prompts, params=SamplingParams(max_new_tokens=8), n=4, seed=2, batch_size=8)
        batch = engine.sample(free)
        validate_batch(batch, free, engine)
        assert (batch.lengths < 8).any(), engine.name
        ended = batch.lengths < 8
        assert (batch.tokens[ended, batch.lengths[ended] - 1] == 11).all()
        held = SampleRequest(prompts=prompts, params=SamplingParams(max_new_tokens=8, ignore_eos=True), n=4, seed=2, batch_size=8)
        batch = engine.sample(held)
        validate_batch(batch, held, engine)
        assert (batch.lengths == 8).all() and not (batch.tokens == 11).any(), engine.name


def test_model_folder_and_string_options(tmp_path: Path, target: LlamaForCausalLM, draft: LlamaForCausalLM) -> None:
    target.save_pretrained(tmp_path / "t")
    draft.save_pretrained(tmp_path / "d")
    engine = HFAssistedEngine(str(tmp_path / "t"), str(tmp_path / "d"), num_assistant_tokens="2")
    assert engine.num_assistant_tokens == 2 and engine.describe()["draft"] == str(tmp_path / "d")
    req = request(SamplingParams(max_new_tokens=4, ignore_eos=True), n=1)
    validate_batch(engine.sample(req), req, engine)
    with pytest.raises(ConfigError, match="num_assistant_tokens"):
        HFAssistedEngine(target, draft, num_assistant_tokens="two")
    with pytest.raises(ConfigError, match="dtype"):
        HFSampleEngine(target, dtype="float128")


def test_unset_top_k_is_sent_as_zero() -> None:
    kw = generation_kwargs(SamplingParams(temperature=0.8), eos_token_id=EOS, pad_token_id=PAD)
    assert kw["top_k"] == 0 and kw["top_p"] == 1.0 and kw["do_sample"] is True and kw["temperature"] == 0.8
    kw = generation_kwargs(SamplingParams(ignore_eos=True, max_new_tokens=9), eos_token_id=EOS, pad_token_id=PAD)
    assert kw["suppress_tokens"] == [EOS] and kw["min_new_tokens"] == 9


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=1.0, max_new_tokens=4),
        SamplingParams(temperature=0.7, top_k=20, max_new_tokens=4),
        SamplingParams(temperature=1.3, top_p=0.6, max_new_tokens=4),
        SamplingParams(temperature=0.5, top_k=50, top_p=0.8, max_new_tokens=4, ignore_eos=True),
    ],
    ids=lambda p: p.label(),
)
def test_hf_processing_matches_process_logits(target: LlamaForCausalLM, params: SamplingParams) -> None:
    """generate()'s processed scores, with the engine's kwargs, equal process_logits on its raw logits."""
    kwargs = generation_kwargs(params, eos_token_id=EOS, pad_token_id=PAD)
    ids = torch.tensor([list(PROMPTS[0])])
    torch.manual_seed(0)
    out = target.generate(
        input_ids=ids, attention_mask=torch.ones_like(ids), output_scores=True, output_logits=True,
        return_dict_in_generate=True, **kwargs,
    )
    truncated = 0
    for raw, processed in zip(out.logits, out.scores):
        ours = process_logits(raw, params, eos_token_id=EOS)
        theirs = torch.softmax(processed.float(), dim=-1)
        assert torch.equal(ours > 0, theirs > 0), "different support"
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)
        truncated += int((ours == 0).sum())
    if params.top_k or params.top_p < 1 or params.ignore_eos:
        assert truncated > 0  # the truncation really bit


@pytest.mark.parametrize("processing", ["hf", "vllm"])
def test_boundaries_agree_with_transformers(processing: str) -> None:
    """Ties at the top-k cut: transformers and process_logits keep every tied token; at the top-p cut the same tied
    tokens; without ties the same kept set (mass strictly before a token < top_p), in the ``hf`` order even where a
    mass falls on the cut (vLLM's float32 ``1 - top_p`` differs there: tests/core/test_processing_profiles.py)."""
    logits = torch.tensor([[3.0, 1.0, 2.0, 2.0, 2.0, 0.0]])
    theirs = TopKLogitsWarper(top_k=2)(None, logits.clone()).isfinite()
    ours = process_logits(logits, SamplingParams(top_k=2, processing=processing)) > 0
    assert theirs.tolist() == [[True, False, True, True, True, False]]
    assert torch.equal(ours, theirs)
    tied = torch.tensor([[0.0] * 20 + [1.0]])  # 20 tied tokens (more than 16: torch's sort is not stable)
    for top_p in (0.3, 0.5, 0.8):
        theirs = TopPLogitsWarper(top_p=top_p)(None, tied.clone()).isfinite()
        ours = process_logits(tied, SamplingParams(top_p=top_p, processing=processing)) > 0
        assert torch.equal(theirs, ours), top_p
        assert 1 < int(ours.sum()) < 21  # the cut falls inside the tie
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    for top_p in (0.5, 0.51, 0.8, 0.81, 0.95, 0.96) if processing == "hf" else (0.51, 0.81, 0.96):
        theirs = TopPLogitsWarper(top_p=top_p)(None, logits.clone()).isfinite()
        ours = process_logits(logits, SamplingParams(top_p=top_p, processing=processing)) > 0
        assert torch.equal(theirs, ours), top_p
