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


def test_top_k_ties_go_to_the_lowest_ids() -> None:
    check(process_logits(logits_of(2, 1, 2, 2), SamplingParams(top_k=2)), [0.5, 0, 0.5, 0])


def test_top_k_at_or_above_vocab_is_off() -> None:
    check(process_logits(logits_of(1, 3), SamplingParams(top_k=5)), [0.25, 0.75])


def test_top_p_keeps_the_shortest_prefix_reaching_p() -> None:
    # sorted 0.5, 0.3, 0.15, 0.05: mass before is 0, 0.5, 0.8, 0.95
    logits = logits_of(0.15, 0.5, 0.05, 0.3)
    check(process_logits(logits, SamplingParams(top_p=0.7)), [0, 0.5 / 0.8, 0, 0.3 / 0.8])
    check(process_logits(logits, SamplingParams(top_p=0.9)), [0.15 / 0.95, 0.5 / 0.95, 0, 0.3 / 0.95])
    check(process_logits(logits, SamplingParams(top_p=0.4)), [0, 1, 0, 0])


def test_top_p_ties_go_to_the_lowest_ids() -> None:
    # four equal tokens: mass before is 0, .25, .5, .75 in id order; top_p=0.5 keeps two
    check(process_logits(logits_of(1, 1, 1, 1), SamplingParams(top_p=0.5)), [0.5, 0.5, 0, 0])


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


def _top_p_by_full_sort(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """The top-p rule written out: stable descending sort of the whole row, keep mass-before < top_p."""
    sorted_p, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    mass_before = torch.cumsum(sorted_p, dim=-1) - sorted_p
    return torch.zeros_like(mass_before, dtype=torch.bool).scatter(-1, order, mass_before < top_p)


@pytest.mark.parametrize("top_p", [0.3, 0.9, 0.99, 0.9999])
def test_top_p_keep_equals_the_full_sort_bit_for_bit(top_p: float) -> None:
    """The candidate shortcut (topk, then the whole sort for long nuclei) keeps exactly the full sort's tokens."""
    from speceq.core.processing import top_p_keep

    g = torch.Generator().manual_seed(0)
    vocab = 49_152
    peaked = torch.randn(24, vocab, generator=g) * 4.0  # short nuclei: decided by the 257 candidates
    flat = torch.randn(8, vocab, generator=g) * 0.5  # nuclei of thousands of tokens: 4 097, then the sort
    tied = torch.round(torch.randn(16, vocab, generator=g) * 2.0) * 1.5  # few distinct values: ties everywhere
    for logits in (peaked, flat, tied):
        probs = torch.softmax(logits, dim=-1)
        assert torch.equal(top_p_keep(probs, top_p), _top_p_by_full_sort(probs, top_p))


def test_top_p_keep_ties_at_the_candidate_boundary() -> None:
    """Tokens tied at the 256th / 257th largest probability: the kept ones are the lowest ids, as in the full sort."""
    from speceq.core.processing import top_p_keep

    vocab = 5_000
    logits = torch.full((1, vocab), -20.0)
    logits[0, 1000:1300] = 0.0  # 300 equal tokens straddle the 257 candidates
    logits[0, 7] = 1.0
    probs = torch.softmax(logits, dim=-1)
    for top_p in (0.5, 0.8, 0.95):
        keep = top_p_keep(probs, top_p)
        assert torch.equal(keep, _top_p_by_full_sort(probs, top_p))
        kept = keep[0].nonzero().flatten().tolist()
        assert kept[0] == 7 and kept[1:] == list(range(1000, 1000 + len(kept) - 1))
