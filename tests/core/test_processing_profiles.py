"""The request fields in process_logits: both named orders against independent implementations.

- ``hf``: against transformers' own logits processors (SequenceBias, RepetitionPenalty,
  Temperature, TopK, TopP, MinP), run on the same logits and the row's prompt + generated ids.
- ``vllm``: vLLM is not installed in this environment, so against a transcription, written
  here, of the formulas vLLM's V1 sampler documents (``apply_penalties`` with its bin counts and
  masks, the logit-bias and min-p logits processors, then temperature, and top-k / top-p as
  ``apply_top_k_only`` and ``apply_top_k_top_p_pytorch`` compute them). The check against vLLM's own
  sampler runs in the vLLM job's environment (``scripts/vllm/processing_check.py``).

Both on distinct logits and on tied ones (values on a coarse grid, as a bfloat16 model's are),
so the tie rules at the top-k, top-p and min-p cuts are compared too.
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


def tied_rows(seed: int, n: int = 6) -> tuple[torch.Tensor, list[list[int]], list[list[int]]]:
    """As :func:`rows`, with the logits on a grid of 0.25 (few distinct values: ties at every cut).

    V = 40 > 16 tokens, so torch's unstable sort does not keep tied tokens in id order here."""
    logits, prompts, outputs = rows(seed, n)
    return torch.round(logits * 4.0) / 4.0, prompts, outputs


HF_CASES = [
    {"repetition_penalty": 1.3},
    {"repetition_penalty": 0.7, "temperature": 0.8},
    {"min_p": 0.1},
    {"min_p": 0.05, "top_k": 12, "top_p": 0.8, "temperature": 0.7},
    {"logit_bias": {3: 5.0, 17: -2.5, 0: 100.0}},
    {"logit_bias": {5: 4.0}, "repetition_penalty": 1.5, "min_p": 0.2, "top_p": 0.9, "temperature": 1.3},
]


#: Cases whose cuts land inside ties on :func:`tied_rows`.
TIED_CASES = [
    {"top_k": 5},
    {"top_k": 12, "temperature": 0.7},
    {"top_p": 0.5},
    {"top_p": 0.8, "temperature": 1.3},
    {"top_k": 15, "top_p": 0.7},
    {"min_p": 1.0},  # keeps exactly the tokens tied with the largest
    {"min_p": 0.1, "top_k": 10, "top_p": 0.9},
]


def transformers_law(params: SamplingParams, logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """transformers' processors for ``params`` on one row ``[1, V]`` of logits, after ``ids`` (prompt + generated)."""
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
    return torch.softmax(procs(ids, logits.clone()), dim=-1)


@pytest.mark.parametrize("fields", HF_CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hf_order_equals_transformers_processors(fields: dict, seed: int) -> None:
    params = SamplingParams(processing="hf", **fields)
    logits, prompts, outputs = rows(seed)
    history = token_history(prompts, outputs, V)
    for r in range(len(prompts)):
        ids = torch.tensor([prompts[r] + outputs[r]])  # generate()'s input_ids: prompt then generated
        theirs = transformers_law(params, logits[r : r + 1], ids)[0]
        ours = process_logits(logits[r], params, history=TokenHistory(history.prompt_mask[r], history.output_counts[r]))
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0)


@pytest.mark.parametrize("fields", TIED_CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hf_order_on_tied_logits_equals_transformers_processors(fields: dict, seed: int) -> None:
    """Ties at the k-th value all stay; tied tokens at the nucleus edge are the ones transformers keeps."""
    params = SamplingParams(processing="hf", **fields)
    logits, _, _ = tied_rows(seed)
    theirs = torch.cat([transformers_law(params, logits[r : r + 1], torch.tensor([[0]])) for r in range(len(logits))])
    torch.testing.assert_close(process_logits(logits, params), theirs, atol=1e-6, rtol=0)


def test_tied_rows_put_ties_across_the_cuts() -> None:
    """The tied cases are not vacuous: keeping exactly k, or ranking nucleus ties by lowest id, changes the law."""
    exactly_k = lowest_id_nucleus = 0
    for seed in (0, 1, 2):
        logits, _, _ = tied_rows(seed)
        for fields in TIED_CASES:
            params = SamplingParams(**fields)
            x = logits / params.temperature
            if params.top_k:
                kth = torch.topk(x, params.top_k, dim=-1).values[:, -1:]
                exactly_k += int(((x >= kth).sum(dim=-1) > params.top_k).any())
            if params.top_p < 1.0 and not params.top_k and not params.min_p:
                law = process_logits(logits, params)
                probs = torch.softmax(x, dim=-1)
                stable = torch.sort(probs, dim=-1, descending=True, stable=True)  # ties by lowest id
                keep = torch.cumsum(stable.values, dim=-1) - stable.values < params.top_p
                lowest = torch.zeros_like(keep).scatter(-1, stable.indices, keep)
                lowest_id_nucleus += int(not torch.equal(law > 0, lowest))
    assert exactly_k > 0 and lowest_id_nucleus > 0


def vllm_transcription(logits: torch.Tensor, params: SamplingParams, prompts: list[list[int]],
                       outputs: list[list[int]]) -> torch.Tensor:
    """vLLM V1's documented sampling path, transcribed: logits processors (logit bias), apply_penalties,
    temperature, min-p (probs < min_p * max prob -> -inf), top-k (logits < the k-th largest -> -inf) and top-p
    (ascending sort, drop while the cumulative mass is <= 1 - p, the last kept); then softmax."""
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
    k = params.top_k if 0 < params.top_k < vocab else vocab  # off = the vocabulary size, as vLLM fills it
    if params.top_p < 1.0:  # apply_top_k_top_p_pytorch: one ascending sort (not stable), top-k then top-p on it
        logits_sort, logits_idx = x.sort(dim=-1, descending=False)
        kth = logits_sort.gather(1, torch.full((num_seqs, 1), vocab - k))
        logits_sort = logits_sort.masked_fill(logits_sort < kth, -math.inf)
        probs_sum = torch.cumsum(logits_sort.softmax(dim=-1), dim=-1)
        top_p_mask = probs_sum <= 1 - torch.full((num_seqs, 1), params.top_p, dtype=torch.float32)
        top_p_mask[:, -1] = False  # at least one
        x = x.scatter(-1, logits_idx, logits_sort.masked_fill(top_p_mask, -math.inf))
    elif params.top_k:  # apply_top_k_only: every logit below the k-th largest
        kth = torch.topk(x, params.top_k, dim=-1).values[:, -1:]
        x = x.masked_fill(x < kth, -math.inf)
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


@pytest.mark.parametrize("fields", TIED_CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vllm_order_on_tied_logits_equals_the_transcribed_v1_sampler(fields: dict, seed: int) -> None:
    params = SamplingParams(**fields)
    logits, prompts, outputs = tied_rows(seed)
    ours = process_logits(logits, params, history=token_history(prompts, outputs, V))
    torch.testing.assert_close(ours, vllm_transcription(logits, params, prompts, outputs), atol=1e-6, rtol=0)


def test_a_mass_on_the_nucleus_cut_is_decided_as_each_library_decides_it() -> None:
    """Masses 0.5, 0.3, 0.15, 0.05: the ascending cumulative mass 0.2 sits on 1 - 0.8. In float32 vLLM's 1 - p is
    just below 0.2 (the 0.15 token stays) and transformers' float32(1 - p) is 0.2 itself (it goes)."""
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    for top_p in (0.5, 0.8, 0.95):
        vllm = process_logits(logits, SamplingParams(top_p=top_p))
        torch.testing.assert_close(vllm, vllm_transcription(logits, SamplingParams(top_p=top_p), [[]], [[]]),
                                   atol=1e-6, rtol=0)
        hf = process_logits(logits, SamplingParams(top_p=top_p, processing="hf"))
        torch.testing.assert_close(hf, transformers_law(SamplingParams(top_p=top_p), logits, torch.tensor([[0]])),
                                   atol=1e-6, rtol=0)
    assert int((process_logits(logits, SamplingParams(top_p=0.8)) > 0).sum()) == 3
    assert int((process_logits(logits, SamplingParams(top_p=0.8, processing="hf")) > 0).sum()) == 2


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
