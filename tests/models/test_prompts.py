"""The default prompts: ragged lengths, repeated n-grams, and realistic continuations."""

from __future__ import annotations

import math

import pytest
import torch

from speceq.models import VOCAB_SIZE, ByteTokenizer
from speceq.models.prompts import DEFAULT_PROMPTS

TOK = ByteTokenizer()


def suffix_repeats(text: str, n: int) -> bool:
    """True when the last ``n`` bytes also occur earlier: a prompt-lookup proposer has a match."""
    data = text.encode("utf-8")
    return len(data) > n and data[-n:] in data[:-1]


def test_prompt_count_and_distinct_lengths() -> None:
    lengths = [len(p.encode("utf-8")) for p in DEFAULT_PROMPTS]
    assert len(DEFAULT_PROMPTS) >= 8
    assert len(set(lengths)) == len(lengths), lengths
    assert min(lengths) >= 4 and max(lengths) <= 64 and max(lengths) - min(lengths) >= 30


def test_some_prompts_have_repeated_ngrams() -> None:
    assert sum(suffix_repeats(p, 4) for p in DEFAULT_PROMPTS) >= 2


def test_prompts_encode_within_the_vocabulary() -> None:
    for p in DEFAULT_PROMPTS:
        ids = TOK.encode(p)
        assert all(0 <= i < VOCAB_SIZE for i in ids) and TOK.decode(ids) == p


def test_target_continues_prompts_with_realistic_entropy(target) -> None:  # noqa: ANN001
    entropies = []
    for p in DEFAULT_PROMPTS:
        ids = torch.tensor([TOK.encode(p)])
        with torch.no_grad():
            logp = torch.log_softmax(target(input_ids=ids).logits[0, -1].double(), dim=-1)
        entropy = float(-(logp.exp() * logp).sum())
        # neither near-deterministic (no statistical information) nor near-uniform (untrained)
        assert 0.5 < entropy < 0.85 * math.log(VOCAB_SIZE), f"{p!r}: next-token entropy {entropy:.2f} nats"
        entropies.append(entropy)
    assert 1.5 < sum(entropies) / len(entropies) < 4.0


@pytest.mark.parametrize("n", [3, 4])
def test_suffix_repeats_helper(n: int) -> None:
    assert suffix_repeats("abcd xyz abcd", n)
    assert not suffix_repeats("abcdefgh", n)
