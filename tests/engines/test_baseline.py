"""BaselineEngine: reproducibility, the engine contract, and exact agreement with the oracle."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from speceq.core.params import SamplingParams
from speceq.engines.base import SampleRequest, validate_batch
from speceq.engines.baseline import BaselineEngine
from speceq.errors import ConfigError
from speceq.oracles.hf import TargetOracle

PARAMS = [
    SamplingParams(max_new_tokens=6),
    SamplingParams(temperature=0.7, top_k=20, top_p=0.9, max_new_tokens=6),
    SamplingParams(temperature=1.3, top_p=0.8, max_new_tokens=6, ignore_eos=True),
    SamplingParams(temperature=0.0, max_new_tokens=6),
]


def oracle_probs_of_rows(oracle: TargetOracle, request: SampleRequest, batch, eos_id: int) -> np.ndarray:
    """The oracle's processed law before every generated token, flattened in row order."""
    prefixes = []
    for r in range(batch.rows):
        prompt = list(request.prompts[int(batch.prompt_index[r])])
        row = batch.row_tokens(r)
        prefixes += [prompt + row[:t] for t in range(len(row))]
    return oracle.next_token_probs(prefixes, request.params, eos_token_id=eos_id)


def traced(batch) -> np.ndarray:
    mask = np.arange(batch.tokens.shape[1])[None, :] < batch.lengths[:, None]
    return batch.info["trace_probs"][mask]


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: p.label())
def test_traced_laws_equal_oracle_at_batch_4_with_mixed_lengths(target, eos_id, params, mixed_prompts) -> None:
    engine = BaselineEngine(target, eos_token_id=eos_id, trace=True)
    request = SampleRequest(prompts=mixed_prompts, params=params, n=4, seed=11, batch_size=4)
    batch = engine.sample(request)
    validate_batch(batch, request, engine)
    expected = oracle_probs_of_rows(TargetOracle(target), request, batch, eos_id)
    np.testing.assert_allclose(traced(batch), expected, atol=1e-5, rtol=0)


def test_same_seed_same_rows_other_seed_other_rows(target, mixed_prompts) -> None:
    engine = BaselineEngine(target)
    request = SampleRequest(prompts=mixed_prompts, params=SamplingParams(max_new_tokens=8), n=3, seed=5, batch_size=4)
    a, b = engine.sample(request), engine.sample(request)
    c = engine.sample(SampleRequest(prompts=mixed_prompts, params=request.params, n=3, seed=6, batch_size=4))
    np.testing.assert_array_equal(a.tokens, b.tokens)
    assert not np.array_equal(a.tokens, c.tokens)


def test_greedy_rows_do_not_depend_on_batch_size(target, mixed_prompts) -> None:
    engine = BaselineEngine(target)
    params = SamplingParams(temperature=0.0, max_new_tokens=10, ignore_eos=True)
    alone = engine.sample(SampleRequest(prompts=mixed_prompts, params=params, n=1, seed=0, batch_size=1))
    together = engine.sample(SampleRequest(prompts=mixed_prompts, params=params, n=1, seed=0, batch_size=3))
    np.testing.assert_array_equal(alone.tokens, together.tokens)


def test_eos_ends_rows_and_the_batch_is_valid(target, eos_id, mixed_prompts) -> None:
    engine = BaselineEngine(target, eos_token_id=eos_id)
    request = SampleRequest(prompts=mixed_prompts, params=SamplingParams(max_new_tokens=12), n=8, seed=2, batch_size=5)
    batch = engine.sample(request)
    validate_batch(batch, request, engine)
    short = batch.lengths < 12
    assert short.any(), "no row ended at EOS: the fixture's EOS is too rare to test this"
    assert (batch.tokens[np.flatnonzero(short), batch.lengths[short] - 1] == eos_id).all()


def test_ignore_eos_gives_full_rows_without_eos(target, eos_id, mixed_prompts) -> None:
    engine = BaselineEngine(target, eos_token_id=eos_id)
    params = SamplingParams(max_new_tokens=12, ignore_eos=True)
    request = SampleRequest(prompts=mixed_prompts, params=params, n=8, seed=2, batch_size=5)
    batch = engine.sample(request)
    validate_batch(batch, request, engine)
    assert (batch.lengths == 12).all() and not (batch.tokens == eos_id).any()


def test_describe_names_model_size_dtype_device(target) -> None:
    info = BaselineEngine(target).describe()
    assert info["model"]["parameters"] == sum(p.numel() for p in target.parameters())
    assert info["model"]["dtype"] == "float32" and info["model"]["device"] == "cpu"
    assert info["engine"] == "baseline" and info["eos_token_id"] == 257


def test_prompt_outside_vocabulary_is_a_config_error(target) -> None:
    engine = BaselineEngine(target)
    request = SampleRequest(prompts=((1, 2), (3, 999)), params=SamplingParams(), n=1, seed=0)
    with pytest.raises(ConfigError, match="prompt 1.*999"):
        engine.sample(request)


def test_unknown_dtype_is_a_config_error(target) -> None:
    with pytest.raises(ConfigError, match="dtype"):
        BaselineEngine(target, dtype="float8")


def test_wall_time_and_layout(target, mixed_prompts) -> None:
    request = SampleRequest(prompts=mixed_prompts, params=SamplingParams(max_new_tokens=3), n=2, seed=0, batch_size=4)
    batch = BaselineEngine(target).sample(request)
    assert batch.wall_time_s is not None and batch.wall_time_s > 0
    np.testing.assert_array_equal(batch.prompt_index, [0, 1, 2, 0, 1, 2])
    assert torch.get_num_threads() == 1
