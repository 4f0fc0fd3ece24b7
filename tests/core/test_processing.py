"""process_logits and sample_from_probs against probabilities computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from speceq.core.params import SamplingParams
from speceq.core.processing import process_logits, sample_from_probs


def logits_of(*weights: float) -> torch.Tensor:
    """Logits whose softmax is proportional to ``weights`` (0 weight = -inf)."""
    return torch.tensor([math.log(w) if w > 0 else float("-inf") for w in weights], dtype=torch.float32)


def check(probs: torch.Tensor, expected: list[float]) -> None:
    assert probs.dtype == torch.float32
    torch.testing.assert_close(probs, torch.tensor(expected, dtype=torch.float32), atol=1e-6, rtol=0)


def test_temperature_one_is_softmax() -> None:
    check(process_logits(logits_of(1, 2, 4), SamplingParams()), [1 / 7, 2 / 7, 4 / 7])


def test_temperature_half_squares_the_weights() -> None:
    # logits / 0.5 doubles them: weights 1, 2, 4 become 1, 4, 16
    check(process_logits(logits_of(1, 2, 4), SamplingParams(temperature=0.5)), [1 / 21, 4 / 21, 16 / 21])


def test_temperature_two_takes_square_roots() -> None:
    s = 1 + math.sqrt(2) + 2
    check(process_logits(logits_of(1, 2, 4), SamplingParams(temperature=2.0)), [1 / s, math.sqrt(2) / s, 2 / s])


def test_top_k_keeps_the_k_largest() -> None:
    check(process_logits(logits_of(1, 2, 4, 3), SamplingParams(top_k=2)), [0, 0, 4 / 7, 3 / 7])


def test_top_k_keeps_every_token_tied_with_the_kth() -> None:
    # the 2nd largest logit is tied three ways: all three stay, as in vLLM and transformers
    check(process_logits(logits_of(2, 1, 2, 2), SamplingParams(top_k=2)), [1 / 3, 0, 1 / 3, 1 / 3])
    check(process_logits(logits_of(2, 1, 2, 2), SamplingParams(top_k=2, processing="hf")), [1 / 3, 0, 1 / 3, 1 / 3])


def test_top_k_at_or_above_vocab_is_off() -> None:
    check(process_logits(logits_of(1, 3), SamplingParams(top_k=5)), [0.25, 0.75])


def test_top_p_keeps_the_shortest_prefix_reaching_p() -> None:
    # sorted 0.5, 0.3, 0.15, 0.05: mass before is 0, 0.5, 0.8, 0.95
    logits = logits_of(0.15, 0.5, 0.05, 0.3)
    check(process_logits(logits, SamplingParams(top_p=0.7)), [0, 0.5 / 0.8, 0, 0.3 / 0.8])
    check(process_logits(logits, SamplingParams(top_p=0.9)), [0.15 / 0.95, 0.5 / 0.95, 0, 0.3 / 0.95])
    check(process_logits(logits, SamplingParams(top_p=0.4)), [0, 1, 0, 0])


def test_top_p_ties_are_ranked_as_the_libraries_sort_them() -> None:
    # four equal tokens, top_p=0.5 keeps two: the libraries sort ascending (ids 0..3 for four
    # equal values) and drop from the front, so the highest ids stay
    check(process_logits(logits_of(1, 1, 1, 1), SamplingParams(top_p=0.5)), [0, 0, 0.5, 0.5])


def test_order_is_temperature_then_top_k_then_top_p() -> None:
    # T=0.5: weights 1,4,9,16; top_k=3 drops id 0 -> 4,9,16 /29; top_p=0.6: 16/29=.55 < .6 keeps 9 too
    probs = process_logits(logits_of(1, 2, 3, 4), SamplingParams(temperature=0.5, top_k=3, top_p=0.6))
    check(probs, [0, 0, 9 / 25, 16 / 25])


def test_greedy_is_one_hot_on_the_first_maximum() -> None:
    check(process_logits(logits_of(1, 3, 3, 2), SamplingParams(temperature=0.0)), [0, 1, 0, 0])


def test_ignore_eos_masks_eos_when_sampling() -> None:
    probs = process_logits(logits_of(1, 1, 2), SamplingParams(ignore_eos=True), eos_token_id=2)
    check(probs, [0.5, 0.5, 0])


def test_ignore_eos_masks_eos_when_greedy() -> None:
    probs = process_logits(logits_of(1, 2, 8), SamplingParams(temperature=0.0, ignore_eos=True), eos_token_id=2)
    check(probs, [0, 1, 0])


def test_eos_is_kept_without_ignore_eos() -> None:
    check(process_logits(logits_of(1, 1, 2), SamplingParams(), eos_token_id=2), [0.25, 0.25, 0.5])


def test_leading_dimensions_are_processed_row_by_row() -> None:
    logits = torch.stack([torch.stack([logits_of(1, 2, 4, 3), logits_of(4, 3, 2, 1)])] * 2)  # [2, 2, 4]
    probs = process_logits(logits, SamplingParams(top_k=2))
    assert probs.shape == (2, 2, 4)
    check(probs[1, 0], [0, 0, 4 / 7, 3 / 7])
    check(probs[0, 1], [4 / 7, 3 / 7, 0, 0])


def test_sample_from_probs_follows_the_inverse_cdf() -> None:
    probs = torch.tensor([[0.0, 0.25, 0.0, 0.75]] * 4000)
    gen = torch.Generator().manual_seed(0)
    tokens = sample_from_probs(probs, gen)
    counts = torch.bincount(tokens, minlength=4)
    assert counts[0] == 0 and counts[2] == 0
    assert abs(int(counts[1]) / 4000 - 0.25) < 4 * math.sqrt(0.25 * 0.75 / 4000)


def test_sample_from_probs_is_reproducible_per_generator_seed() -> None:
    probs = torch.softmax(torch.randn(64, 10, generator=torch.Generator().manual_seed(1)), dim=-1)
    a = sample_from_probs(probs, torch.Generator().manual_seed(7))
    b = sample_from_probs(probs, torch.Generator().manual_seed(7))
    c = sample_from_probs(probs, torch.Generator().manual_seed(8))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


@pytest.mark.parametrize("token", [0, 3])
def test_sample_from_one_hot_returns_that_token(token: int) -> None:
    probs = torch.zeros(16, 4)
    probs[:, token] = 1.0
    assert (sample_from_probs(probs, torch.Generator().manual_seed(0)) == token).all()


def _top_p_by_full_sort(probs: torch.Tensor, top_p: float, key: torch.Tensor | None = None) -> torch.Tensor:
    """The top-p rule written out: rank by the reverse of the libraries' ascending sort of ``key`` (default the
    probabilities), keep a token while the mass from it to the end of the ranking (float64, then float32) is
    > vLLM's float32 1 - top_p."""
    key = probs if key is None else key
    order = torch.sort(key, dim=-1).indices.flip(-1)
    v = probs.gather(-1, order).double()
    assert bool((v[:, 1:] <= v[:, :-1]).all())  # the key ranks as the probabilities do
    c = torch.cumsum(v, dim=-1)
    mass_from = probs.double().sum(dim=-1, keepdim=True) - torch.cat([torch.zeros_like(c[:, :1]), c[:, :-1]], dim=-1)
    inside = mass_from.float() > 1.0 - torch.tensor(top_p, dtype=torch.float32)
    inside[:, 0] = True
    return torch.zeros_like(inside).scatter(-1, order, inside)


def _transformers_top_p(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """The tokens transformers' TopPLogitsWarper keeps ([rows, V] bool)."""
    from transformers.generation.logits_process import TopPLogitsWarper

    return torch.isfinite(TopPLogitsWarper(top_p)(None, logits.clone()))


@pytest.mark.parametrize("top_p", [0.3, 0.9, 0.99, 0.9999])
def test_top_p_keep_equals_the_full_sort_bit_for_bit(top_p: float) -> None:
    """The candidate shortcut (topk, then the whole sort for long nuclei or a tie across the cut) keeps exactly
    the full sort's tokens."""
    from speceq.core.processing import top_p_keep

    g = torch.Generator().manual_seed(0)
    vocab = 49_152
    peaked = torch.randn(24, vocab, generator=g) * 4.0  # short nuclei: decided by the 257 candidates
    flat = torch.randn(8, vocab, generator=g) * 0.5  # nuclei of thousands of tokens: 4 097, then the sort
    tied = torch.round(torch.randn(16, vocab, generator=g) * 2.0) * 1.5  # few distinct values: ties everywhere
    bf16 = (torch.randn(16, vocab, generator=g) * 3.0).to(torch.bfloat16).float()  # a bfloat16 model's ties
    for logits in (peaked, flat, tied, bf16):
        probs = torch.softmax(logits, dim=-1)
        assert torch.equal(top_p_keep(probs, top_p), _top_p_by_full_sort(probs, top_p))
        assert torch.equal(top_p_keep(probs, top_p, logits), _top_p_by_full_sort(probs, top_p, logits))


@pytest.mark.parametrize("top_p", [0.2, 0.5, 0.8, 0.95])
def test_top_p_keep_on_tied_logits_equals_transformers(top_p: float) -> None:
    """bfloat16-rounded logits (ties at the cut) and coarse ones: the same tokens as transformers' TopPLogitsWarper,
    which sorts the same logits; ranking ties by lowest id instead would differ (the case is not vacuous)."""
    from speceq.core.processing import top_p_keep

    g = torch.Generator().manual_seed(3)
    by_lowest_id_differs = 0
    for vocab, logits in ((1000, (torch.randn(16, 1000, generator=g) * 2.0).to(torch.bfloat16).float()),
                          (40, torch.round(torch.randn(16, 40, generator=g) * 2.0) / 2.0)):
        probs = torch.softmax(logits, dim=-1)
        keep = top_p_keep(probs, top_p, logits)
        assert torch.equal(keep, _transformers_top_p(logits, top_p)), vocab
        stable = torch.sort(probs, dim=-1, descending=True, stable=True)  # ties by lowest id
        lowest_first = torch.zeros_like(keep).scatter(
            -1, stable.indices, torch.cumsum(stable.values, dim=-1) - stable.values < top_p)
        by_lowest_id_differs += int(not torch.equal(keep, lowest_first))
    assert by_lowest_id_differs > 0


def test_top_p_keep_ties_at_the_candidate_boundary() -> None:
    """300 tokens tied at the 256th / 257th largest probability: the full sort's tokens and transformers'."""
    from speceq.core.processing import top_p_keep

    vocab = 5_000
    logits = torch.full((1, vocab), -20.0)
    logits[0, 1000:1300] = 0.0  # 300 equal tokens straddle the 257 candidates
    logits[0, 7] = 1.0
    probs = torch.softmax(logits, dim=-1)
    for top_p in (0.5, 0.8, 0.95):
        keep = top_p_keep(probs, top_p, logits)
        assert torch.equal(keep, _top_p_by_full_sort(probs, top_p, logits))
        assert torch.equal(keep, _transformers_top_p(logits, top_p))
        kept = keep[0].nonzero().flatten().tolist()
        assert kept[0] == 7 and all(1000 <= t < 1300 for t in kept[1:]) and 1 < len(kept) < 301
