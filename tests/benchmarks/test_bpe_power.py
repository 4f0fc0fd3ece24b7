"""benchmarks/bpe_power.py: its row cache returns exactly the oracle's scores (duplicate rows scored once)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from benchmark_scripts import load_script

from speceq.core.params import SamplingParams
from speceq.engines.base import batch_from_lists
from speceq.models.hf_utils import tiny_random_llama
from speceq.oracles.hf import TargetOracle


def _module():  # noqa: ANN202
    return load_script("bpe_power")


@pytest.mark.parametrize("with_draft", [False, True], ids=["target", "target+draft"])
def test_row_cache_returns_the_oracle_scores(with_draft) -> None:
    torch.set_num_threads(1)
    target = tiny_random_llama(0, init_std=0.5)
    oracle = TargetOracle(target, draft=tiny_random_llama(1, init_std=0.5, layers=1) if with_draft else None)
    cached = _module().RowCachedOracle(oracle)
    prompts = ((5, 17, 99), (7,))
    params = SamplingParams(temperature=0.8, top_k=30, max_new_tokens=3)
    rows = [[10, 11, 12], [13], [10, 11, 12], [], [13], [40, 41]]  # duplicates, an empty row
    batch = batch_from_lists(rows, np.array([0, 1, 0, 1, 1, 0]), max_new_tokens=3)
    want = oracle.score(prompts, batch, params)
    for _ in range(2):  # the second call is served from the cache
        got = cached.score(prompts, batch, params)
        for name in ("row", "position", "token", *_module().FIELDS):
            a, b = getattr(got, name), getattr(want, name)
            if b is None:
                assert a is None, name
            else:
                np.testing.assert_array_equal(a, b, err_msg=name)
    assert cached.scored_tokens == 6  # [10, 11, 12], [13] and [40, 41] once each
    assert cached.vocab_size == oracle.vocab_size  # everything else is delegated
