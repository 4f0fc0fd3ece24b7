"""RememberingOracle: the wrapped oracle's scores, each distinct row scored once."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest
import torch

from speceq.core.params import SamplingParams
from speceq.engines.base import SampleBatch, batch_from_lists
from speceq.models.hf_utils import tiny_random_llama
from speceq.oracles.hf import TargetOracle
from speceq.oracles.memo import RememberingOracle
from speceq.stats.scores import TokenScores

PROMPTS = ((5, 17, 99, 3), (7,), (200, 31, 64))
FIRST = [[10, 11, 12], [13], [14, 15, 16, 17, 18], [19, 20], [21], [22, 23, 24]]
# rows 1, 0 and 3 of FIRST again (same prompts), a new row, and a duplicate of the new row
SECOND = [[13], [10, 11, 12], [19, 20], [30, 31], [30, 31]]
PARAMS = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=5)


class CountingOracle(TargetOracle):
    """A TargetOracle that records how many rows each score call sent."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.rows_scored: list[int] = []

    def score(self, prompts, batch, params, **kw) -> TokenScores:
        self.rows_scored.append(batch.rows)
        return super().score(prompts, batch, params, **kw)


@pytest.fixture(scope="module")
def models() -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.set_num_threads(1)
    return tiny_random_llama(0, init_std=0.5), tiny_random_llama(1, init_std=0.5, layers=1)


def same_scores(a: TokenScores, b: TokenScores) -> None:
    for f in fields(TokenScores):
        x, y = getattr(a, f.name), getattr(b, f.name)
        assert (x is None) == (y is None), f.name
        if x is not None:
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6, err_msg=f.name)


def test_rows_scored_once_and_answers_equal_fresh_scoring(models) -> None:
    target, draft = models
    inner = CountingOracle(target, draft=draft)
    memo = RememberingOracle(inner)
    first = batch_from_lists(FIRST, np.tile(np.arange(3), 2), max_new_tokens=5)
    second = batch_from_lists(SECOND, np.array([1, 0, 0, 2, 2]), max_new_tokens=5)
    fresh = TargetOracle(target, draft=draft)
    same_scores(memo.score(PROMPTS, first, PARAMS), fresh.score(PROMPTS, first, PARAMS))
    got = memo.score(PROMPTS, second, PARAMS)
    same_scores(got, fresh.score(PROMPTS, second, PARAMS))
    assert got.row.tolist() == [0, 1, 1, 1, 2, 2, 3, 3, 4, 4]  # rows numbered in the asked batch
    assert inner.rows_scored == [6, 1]  # only the one new distinct row went to the model
    assert (memo.scored_rows, memo.reused_rows) == (7, 4)
    assert memo.has_draft and memo.vocab_size == inner.vocab_size and memo.describe()["remembers_scored_rows"]


def test_other_params_or_prompt_are_other_rows(models) -> None:
    target, _ = models
    inner = CountingOracle(target)
    memo = RememberingOracle(inner)
    batch = batch_from_lists([[10, 11, 12]], np.array([0]), max_new_tokens=5)
    memo.score(PROMPTS, batch, PARAMS)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=5)
    same_scores(memo.score(PROMPTS, batch, greedy), TargetOracle(target).score(PROMPTS, batch, greedy))
    other_prompt = SampleBatch(tokens=batch.tokens, lengths=batch.lengths, prompt_index=np.array([1]))
    memo.score(PROMPTS, other_prompt, PARAMS)
    assert inner.rows_scored == [1, 1, 1]
