"""The request fields in process_logits: both named orders against independent implementations.

- ``hf``: against transformers' own logits processors (SequenceBias, RepetitionPenalty,
  Temperature, TopK, TopP, MinP), run on the same logits and the row's prompt + generated ids.
- ``vllm``: vLLM is not installed in this environment, so against a transcription, written
  here, of the formulas vLLM's V1 sampler documents (``apply_penalties`` with its bin counts and
  masks, the logit-bias and min-p logits processors, then temperature, top-k and top-p). The test
  against vLLM's own sampler functions belongs to the vLLM job's environment and is not written yet.
"""

from __future__ import annotations

import math

import pytest
import torch
from transformers.generation.logits_process import (
    LogitsProcessorList,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    SequenceBiasLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from speceq.core.params import SamplingParams
from speceq.core.processing import TokenHistory, process_logits, token_history
from speceq.errors import ConfigError

V = 40


def rows(seed: int, n: int = 6) -> tuple[torch.Tensor, list[list[int]], list[list[int]]]:
    """Random logits [n, V] (distinct values: no ties at a cut) with prompts and generated tokens per row."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn((n, V), generator=g) * 3.0
    prompts = [torch.randint(0, V, (int(torch.randint(1, 8, (1,), generator=g)),), generator=g).tolist()
               for _ in range(n)]
    outputs = [torch.randint(0, V // 2, (r,), generator=g).tolist() for r in range(n)]  # row 0: nothing generated
    return logits, prompts, outputs


HF_CASES = [
    {"repetition_penalty": 1.3},
    {"repetition_penalty": 0.7, "temperature": 0.8},
    {"min_p": 0.1},
    {"min_p": 0.05, "top_k": 12, "top_p": 0.8, "temperature": 0.7},
    {"logit_bias": {3: 5.0, 17: -2.5, 0: 100.0}},
    {"logit_bias": {5: 4.0}, "repetition_penalty": 1.5, "min_p": 0.2, "top_p": 0.9, "temperature": 1.3},
]


@pytest.mark.parametrize("fields", HF_CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hf_order_equals_transformers_processors(fields: dict, seed: int) -> None:
    params = SamplingParams(processing="hf", **fields)
    logits, prompts, outputs = rows(seed)
    procs = LogitsProcessorList()
    if params.logit_bias:
        procs.append(SequenceBiasLogitsProcessor(sequence_bias=[[[t], b] for t, b in params.logit_bias]))
    if params.repetition_penalty != 1.0:
        procs.append(RepetitionPenaltyLogitsProcessor(params.repetition_penalty))
    procs.append(TemperatureLogitsWarper(params.temperature))
    if params.top_k:
        procs.append(TopKLogitsWarper(params.top_k))
    if params.top_p < 1.0:
        procs.append(TopPLogitsWarper(params.top_p))
    if params.min_p:
        procs.append(MinPLogitsWarper(params.min_p))
    history = token_history(prompts, outputs, V)
    for r in range(len(prompts)):
        ids = torch.tensor([prompts[r] + outputs[r]])  # generate()'s input_ids: prompt then generated
        theirs = torch.softmax(procs(ids, logits[r : r + 1].clone()), dim=-1)[0]
        ours = process_logits(logits[r], params, history=TokenHistory(history.prompt_mask[r], history.output_counts[r]))
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0)


def vllm_transcription(logits: torch.Tensor, params: SamplingParams, prompts: list[list[int]],
                       outputs: list[list[int]]) -> torch.Tensor:
    """vLLM V1's documented sampling path, transcribed: logits processors (logit bias), apply_penalties,
    temperature, min-p (probs < min_p * max prob -> -inf), top-k, top-p; then softmax."""
    num_seqs, vocab = logits.shape
    x = logits.clone().float()
    for r in range(num_seqs):  # LogitBiasLogitsProcessor: logits[req, token] += bias
        for t, b in params.logit_bias:
            x[r, t] += b

    def bin_counts_and_mask(tokens: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(1, max(len(t) for t in tokens))
        padded = torch.full((num_seqs, width), vocab, dtype=torch.long)  # padded with vocab_size, as vLLM does
        for r, t in enumerate(tokens):
            padded[r, : len(t)] = torch.tensor(t, dtype=torch.long)
        counts = torch.zeros((num_seqs, vocab + 1), dtype=torch.long)
        counts.scatter_add_(1, padded, torch.ones_like(padded))
        counts = counts[:, :vocab]
        return counts, counts > 0

    _, prompt_mask = bin_counts_and_mask(prompts)
    output_bin_counts, output_mask = bin_counts_and_mask(outputs)
    penalties = torch.where(prompt_mask | output_mask, torch.full_like(x, params.repetition_penalty), 1.0)
    scaling = torch.where(x > 0, 1.0 / penalties, penalties)
    x *= scaling
    x -= params.frequency_penalty * output_bin_counts
    x -= params.presence_penalty * output_mask
    x = x / params.temperature
    if params.min_p > 0:
        probability_values = torch.softmax(x, dim=-1)
        adjusted_min_p = torch.amax(probability_values, dim=-1, keepdim=True) * params.min_p
        x[probability_values < adjusted_min_p] = -math.inf
    if params.top_k:
        kth = torch.topk(x, params.top_k, dim=-1).values[:, -1:]
        x = x.masked_fill(x < kth, -math.inf)
    if params.top_p < 1.0:
        sorted_x, idx = torch.sort(x, dim=-1, descending=False)
        cum = sorted_x.softmax(dim=-1).cumsum(dim=-1)
        remove = cum <= 1 - params.top_p
        remove[:, -1] = False
        x = x.scatter(-1, idx, sorted_x.masked_fill(remove, -math.inf))
    return torch.softmax(x, dim=-1)


VLLM_CASES = [
    {"repetition_penalty": 1.3},
    {"repetition_penalty": 0.8, "temperature": 0.6},
    {"frequency_penalty": 0.7},
    {"presence_penalty": -1.2},
    {"frequency_penalty": 1.1, "presence_penalty": 0.9, "repetition_penalty": 1.2},
    {"min_p": 0.1},
    {"min_p": 0.08, "top_p": 0.85, "top_k": 15, "temperature": 0.7},
    {"logit_bias": {2: 6.0, 30: -100.0}},
    {"logit_bias": {4: 3.0, 9: -1.0}, "repetition_penalty": 1.4, "frequency_penalty": 0.5,
     "presence_penalty": 0.3, "min_p": 0.05, "top_k": 20, "top_p": 0.9, "temperature": 1.2},
]


@pytest.mark.parametrize("fields", VLLM_CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vllm_order_equals_the_transcribed_v1_sampler(fields: dict, seed: int) -> None:
    params = SamplingParams(**fields)
    assert params.processing == "vllm"  # the default
    logits, prompts, outputs = rows(seed)
    ours = process_logits(logits, params, history=token_history(prompts, outputs, V))
    torch.testing.assert_close(ours, vllm_transcription(logits, params, prompts, outputs), atol=1e-6, rtol=0)


def test_the_orders_differ_where_the_libraries_do() -> None:
    """min-p before top-p (vLLM) and after (transformers) give different laws: the profile matters."""
    logits, prompts, outputs = rows(5)
    a = process_logits(logits, SamplingParams(min_p=0.1, top_p=0.8))
    b = process_logits(logits, SamplingParams(min_p=0.1, top_p=0.8, processing="hf"))
    assert float((a - b).abs().max()) > 1e-3


def test_penalties_by_hand() -> None:
    """One row: prompt [0], generated [1, 1]; logits (2, 2, -2, 2)."""
    logits = torch.tensor([2.0, 2.0, -2.0, 2.0])
    hist = token_history([[0, 2]], [[1, 1]], 4)
    h = TokenHistory(hist.prompt_mask[0], hist.output_counts[0])
    rep = process_logits(logits, SamplingParams(repetition_penalty=2.0), history=h)
    expected = torch.softmax(torch.tensor([1.0, 1.0, -4.0, 2.0]), dim=-1)  # prompt and output tokens penalised
    torch.testing.assert_close(rep, expected, atol=1e-7, rtol=0)
    freq = process_logits(logits, SamplingParams(frequency_penalty=0.5, presence_penalty=0.25), history=h)
    expected = torch.softmax(torch.tensor([2.0, 2.0 - 1.0 - 0.25, -2.0, 2.0]), dim=-1)  # generated tokens only
    torch.testing.assert_close(freq, expected, atol=1e-7, rtol=0)
    greedy = process_logits(logits, SamplingParams(temperature=0.0, logit_bias={2: 5.0}), history=h)
    assert greedy.tolist() == [0.0, 0.0, 1.0, 0.0]  # the bias acts before the argmax


def test_a_penalty_without_history_is_refused() -> None:
    with pytest.raises(ConfigError, match="need the row's token history"):
        process_logits(torch.zeros(4), SamplingParams(presence_penalty=0.5))
    process_logits(torch.zeros(4), SamplingParams(min_p=0.5, logit_bias={1: 1.0}))  # no history needed


def test_extended_history_is_the_history_at_each_block_position() -> None:
    prompts, outputs = [[1, 2], [3]], [[4], []]
    drafts = torch.tensor([[5, 5, 1], [0, 6, 0]])
    block = token_history(prompts, outputs, 8).extended(drafts)
    assert block.output_counts.shape == (2, 4, 8)
    for r in range(2):
        for j in range(4):
            want = token_history([prompts[r]], [outputs[r] + drafts[r, :j].tolist()], 8)
            assert torch.equal(block.output_counts[r, j], want.output_counts[0])
            assert torch.equal(block.prompt_mask[r, j], want.prompt_mask[0])
