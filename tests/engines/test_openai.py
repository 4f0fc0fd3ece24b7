"""OpenAICompletionsEngine against the fault-injecting loopback server."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from fake_openai_server import FAULTS, FakeOpenAIServer

from speceq.core.params import SamplingParams
from speceq.engines.base import SampleRequest, validate_batch
from speceq.engines.openai import OpenAICompletionsEngine, call_seed
from speceq.errors import ConfigError, EngineError

KEY_ENV = "SPECEQ_TEST_FAKE_KEY"
SECRET = "sk-test-0123456789abcdef-SECRET"
VOCAB, EOS = 7, 6
PROMPTS = ((1, 2, 3), (4, 5), (2,))


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)


def engine_for(server: FakeOpenAIServer, **options: object) -> OpenAICompletionsEngine:
    defaults: dict[str, object] = dict(
        api_key_env=KEY_ENV, vocab_size=VOCAB, eos_token_id=EOS, timeout_s=5, max_retries=3, backoff_s=0.01,
        max_n_per_request=4,
    )
    return OpenAICompletionsEngine(server.base_url, **{**defaults, **options})


def request(params: SamplingParams | None = None, *, n: int = 6, seed: int = 11) -> SampleRequest:
    return SampleRequest(prompts=PROMPTS, params=params or SamplingParams(max_new_tokens=5), n=n, seed=seed, batch_size=4)


def assert_no_secret(*things: object) -> None:
    for thing in things:
        assert SECRET not in json.dumps(thing, default=str)


def test_valid_batch_layout_and_seeds() -> None:
    with FakeOpenAIServer() as server:
        engine = engine_for(server)
        req = request()
        batch = engine.sample(req)
        validate_batch(batch, req, engine)
        assert batch.info["retries"] == 0 and batch.info["requests"] == 3 * 2  # n=6 in calls of <= 4
        assert (batch.lengths < 5).any()  # some rows end with EOS
        # every row was drawn from its own prompt's distribution: the server rolls probs by the
        # prompt's last token, so a row's tokens can be replayed from the seeds it was sent
        bodies = sorted(server.bodies, key=lambda b: b["seed"])
        assert len({b["seed"] for b in bodies}) == len(bodies)
        seeds = [b["seed"] + i for b in bodies for i in range(b["n"])]
        assert len(set(seeds)) == req.n * len(PROMPTS)  # no two rows share a random stream
        replay = {
            (tuple(b["prompt"]), tuple(server.sample_choice(b["prompt"], b["seed"] + i, 5, False))) for b in bodies for i in range(b["n"])
        }
        got = {(PROMPTS[int(j)], tuple(batch.row_tokens(r))) for r, j in enumerate(batch.prompt_index)}
        assert got <= replay
        assert bodies[0]["return_tokens_as_token_ids"] is True and bodies[0]["logprobs"] == 1
        assert bodies[0]["top_k"] == 0 and bodies[0]["temperature"] == 1.0
        assert server.auth_headers[0] == f"Bearer {SECRET}"
        # reproducible: the same request sends the same seeds and gets the same rows
        again = engine.sample(req)
        np.testing.assert_array_equal(batch.tokens, again.tokens)
        # the fake server's spec-decode counters are read as a delta
        assert batch.accepted_tokens == int(batch.lengths.sum()) and batch.drafted_tokens == 3 * batch.accepted_tokens


def test_ignore_eos_greedy_and_token_ids_mode() -> None:
    with FakeOpenAIServer() as server:
        engine = engine_for(server, token_ids_mode="token_ids", spec_metrics="false")
        req = request(SamplingParams(max_new_tokens=6, ignore_eos=True))
        batch = engine.sample(req)
        validate_batch(batch, req, engine)
        assert (batch.lengths == 6).all() and not (batch.tokens == EOS).any()
        assert server.bodies[-1]["ignore_eos"] is True and server.bodies[-1]["min_tokens"] == 6
        assert server.bodies[-1]["return_token_ids"] is True and batch.drafted_tokens is None
        greedy = request(SamplingParams(temperature=0.0, max_new_tokens=3), n=2)
        start = len(server.bodies)
        engine.sample(greedy)
        assert all(b["n"] == 1 for b in server.bodies[start:])  # vLLM refuses n > 1 when greedy


def test_sampled_distribution_matches_server() -> None:
    """First tokens of prompt 0 follow the server's distribution (seeded, deterministic)."""
    with FakeOpenAIServer(lifetime_s=120) as server:
        engine = engine_for(server, max_n_per_request=64, max_concurrency=4)
        req = SampleRequest(prompts=((3,),), params=SamplingParams(max_new_tokens=1), n=1024, seed=0)
        batch = engine.sample(req)
        validate_batch(batch, req, engine)
        freq = np.bincount(batch.tokens[:, 0], minlength=VOCAB) / req.n
        expected = np.roll(server.probs, 3)
        assert np.abs(freq - expected).max() < 0.05


@pytest.mark.parametrize("fault", FAULTS)
def test_transient_fault_is_retried_and_counted(fault: str) -> None:
    with FakeOpenAIServer(fault=fault, fault_count=2, sleep_s=2.0) as server:
        engine = engine_for(server, timeout_s=0.5, max_concurrency=1)
        req = request(n=2)
        batch = engine.sample(req)
        validate_batch(batch, req, engine)
        assert batch.info["retries"] == 2, batch.info
        assert sum(batch.info["retries_by_kind"].values()) == 2
        assert_no_secret(batch.info, engine.describe())


@pytest.mark.parametrize("fault", FAULTS)
def test_persistent_fault_raises_naming_the_call(fault: str) -> None:
    with FakeOpenAIServer(fault=fault, fault_count=None, sleep_s=2.0) as server:
        engine = engine_for(server, timeout_s=0.3, max_retries=2, max_concurrency=2)
        started = time.perf_counter()
        with pytest.raises(EngineError) as info:
            engine.sample(request(n=2))
        elapsed = time.perf_counter() - started
        message = str(info.value)
        assert "prompt index" in message and "seed" in message and "persisted over 3 attempts" in message
        assert SECRET not in message and SECRET not in repr(info.value)
        assert elapsed < 10  # raises, does not hang


def test_non_retriable_4xx_and_unreachable_server() -> None:
    with FakeOpenAIServer() as server:
        engine = engine_for(server, model="fake-model")
        engine.api_root = server.base_url + "/nowhere/v1"
        with pytest.raises(EngineError, match="not retried"):
            engine.sample(request(n=1))
    closed = OpenAICompletionsEngine(server.base_url, model="m", api_key_env=KEY_ENV, max_retries=1, backoff_s=0.0, timeout_s=1)
    with pytest.raises(EngineError, match="cannot reach") as info:
        closed.sample(request(n=1))
    assert SECRET not in str(info.value)


def test_options_and_seed_blocks() -> None:
    with pytest.raises(ConfigError, match="seed_stride"):
        OpenAICompletionsEngine("http://127.0.0.1:1", seed_stride=8, max_n_per_request=16)
    with pytest.raises(ConfigError, match="token_ids_mode"):
        OpenAICompletionsEngine("http://127.0.0.1:1", token_ids_mode="text")
    with pytest.raises(ConfigError, match="base_url"):
        OpenAICompletionsEngine("127.0.0.1:8000")
    e = OpenAICompletionsEngine("http://127.0.0.1:1/v1/", api_key_env=KEY_ENV, max_concurrency="8", timeout_s="2.5")
    assert e.api_root == "http://127.0.0.1:1/v1" and e.max_concurrency == 8 and e.timeout_s == 2.5
    desc = e.describe()
    assert desc["api_key_set"] is True and desc["api_key_env"] == KEY_ENV
    assert_no_secret(desc)
    # blocks [seed, seed + stride) of different (request seed, call) pairs never overlap
    starts = sorted(call_seed(s, k, 16) for s in range(50) for k in range(40))
    assert all(b - a >= 16 for a, b in zip(starts, starts[1:]))
