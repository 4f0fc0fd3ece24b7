"""End-to-end checks of the project's own engines and the oracle on the bundled models."""

from __future__ import annotations

import numpy as np
import pytest

from speceq.core.params import SamplingParams
from speceq.engines.base import SampleRequest, validate_batch
from speceq.engines.baseline import BaselineEngine
from speceq.engines.reference import ReferenceSpeculativeEngine
from speceq.models import EOS_ID, ByteTokenizer
from speceq.models.prompts import DEFAULT_PROMPTS
from speceq.oracles.hf import TargetOracle


@pytest.fixture(scope="module")
def oracle() -> TargetOracle:
    return TargetOracle()


@pytest.fixture(scope="module")
def prompts() -> tuple[tuple[int, ...], ...]:
    tok = ByteTokenizer()
    return tuple(tuple(tok.encode(p)) for p in DEFAULT_PROMPTS[:4])


@pytest.mark.parametrize("engine_cls", [BaselineEngine, ReferenceSpeculativeEngine])
def test_bundled_engines_sample_the_oracle_law(oracle, prompts, engine_cls) -> None:
    engine = engine_cls(trace=True)
    params = SamplingParams(temperature=0.8, top_p=0.95, max_new_tokens=8)
    request = SampleRequest(prompts=prompts, params=params, n=2, seed=4, batch_size=4)
    batch = engine.sample(request)
    validate_batch(batch, request, engine)
    assert engine.eos_token_id == EOS_ID and engine.vocab_size == 259
    prefixes = [
        list(prompts[int(batch.prompt_index[r])]) + batch.row_tokens(r)[:t]
        for r in range(batch.rows)
        for t in range(int(batch.lengths[r]))
    ]
    mask = np.arange(8)[None, :] < batch.lengths[:, None]
    np.testing.assert_allclose(batch.info["trace_probs"][mask], oracle.next_token_probs(prefixes, params), atol=1e-5)
    scores = oracle.score(prompts, batch, params)
    assert len(scores) == int(batch.lengths.sum()) and (scores.prob > 0).all()
    if engine_cls is ReferenceSpeculativeEngine:
        assert 0.3 < batch.acceptance_rate < 1.0
