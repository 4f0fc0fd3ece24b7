"""The openai engine sends the request fields (min_p, penalties, logit_bias, stop) with vLLM's names,
declares them in vLLM's order only, and reads rows that end at a stop string."""

from __future__ import annotations

import numpy as np
import pytest
from fake_openai_server import FakeOpenAIServer

from speceq.core.params import EXTRA_DEFAULTS, SamplingParams
from speceq.engines.base import SampleRequest, check_sampling_support, sampling_fields, validate_batch
from speceq.engines.openai import OpenAICompletionsEngine
from speceq.errors import ConfigError

KEY_ENV = "SPECEQ_TEST_FAKE_KEY"
VOCAB, EOS = 7, 6


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test")


def engine_for(server: FakeOpenAIServer, **options: object) -> OpenAICompletionsEngine:
    defaults: dict[str, object] = dict(api_key_env=KEY_ENV, vocab_size=VOCAB, eos_token_id=EOS, timeout_s=5,
                                       max_retries=1, backoff_s=0.01, max_n_per_request=64, max_concurrency=4)
    return OpenAICompletionsEngine(server.base_url, **{**defaults, **options})


def test_declares_every_field_in_vllm_order_only() -> None:
    engine = OpenAICompletionsEngine("http://127.0.0.1:1", api_key_env=KEY_ENV)
    assert sampling_fields(engine) == {name: ("vllm",) for name in EXTRA_DEFAULTS}
    check_sampling_support(engine, SamplingParams(min_p=0.1, logit_bias={3: 1.0}), "c")  # accepted
    with pytest.raises(ConfigError, match=r"only in the processing order\(s\) 'vllm'") as info:
        check_sampling_support(engine, SamplingParams(min_p=0.1, processing="hf"), "c", role="candidate")
    assert info.value.where == "case 'c'.min_p"


def test_body_carries_the_fields() -> None:
    params = SamplingParams(max_new_tokens=4, min_p=0.05, repetition_penalty=1.3, presence_penalty=0.5,
                            frequency_penalty=-0.25, logit_bias={"2": 1.5, 4: -3.0}, stop=["\x03"],
                            include_stop_str_in_output=True, tokenizer="bytes", ignore_eos=True)
    with FakeOpenAIServer() as server:
        engine_for(server).sample(SampleRequest(prompts=((1,),), params=params, n=2, seed=3))
        body = server.bodies[-1]
    assert (body["min_p"], body["repetition_penalty"]) == (0.05, 1.3)
    assert (body["presence_penalty"], body["frequency_penalty"]) == (0.5, -0.25)
    assert body["logit_bias"] == {"2": 1.5, "4": -3.0}
    assert body["stop"] == ["\x03"] and body["include_stop_str_in_output"] is True
    assert body["min_tokens"] == 0  # vLLM would check no stop string before min_tokens tokens
    plain = SamplingParams(max_new_tokens=4, ignore_eos=True)
    with FakeOpenAIServer() as server:
        engine_for(server).sample(SampleRequest(prompts=((1,),), params=plain, n=1, seed=3))
        body = server.bodies[-1]
    assert "logit_bias" not in body and "stop" not in body and body["min_tokens"] == 4
    assert (body["min_p"], body["repetition_penalty"], body["presence_penalty"]) == (0.0, 1.0, 0.0)


def test_first_tokens_follow_the_biased_min_p_law() -> None:
    """The server applies what the engine sends: 2048 first tokens against the fake server's processed law."""
    params = SamplingParams(max_new_tokens=1, min_p=0.3, logit_bias={5: 2.0})
    with FakeOpenAIServer(lifetime_s=120) as server:
        engine = engine_for(server)
        req = SampleRequest(prompts=((0,),), params=params, n=2048, seed=0)
        batch = engine.sample(req)
        validate_batch(batch, req, engine)
        law = server.law([0], False, server.bodies[-1])
    freq = np.bincount(batch.tokens[:, 0], minlength=VOCAB) / req.n
    assert (law == 0).sum() >= 2  # min_p cut tokens out
    assert freq[law == 0].sum() == 0
    assert np.abs(freq - law).max() < 0.04
    plain = np.roll(server.probs, 0)
    assert law[5] > 2 * plain[5] / plain.sum()  # the bias moved mass onto token 5


def test_rows_ending_at_a_stop_string_are_read_and_checked() -> None:
    params = SamplingParams(max_new_tokens=8, stop=["\x02"], tokenizer="bytes", ignore_eos=True)
    with FakeOpenAIServer() as server:
        engine = engine_for(server)
        req = SampleRequest(prompts=((1,), (3,)), params=params, n=16, seed=5)
        batch = engine.sample(req)
    validate_batch(batch, req, engine)  # ends exactly at the stop string, never past it
    short = batch.lengths < 8
    assert short.any()
    last = batch.tokens[np.arange(len(batch.lengths)), batch.lengths - 1]
    assert (last[short] == 2).all()
    for r in range(len(batch.lengths)):
        assert 2 not in batch.row_tokens(r)[:-1]


@pytest.mark.parametrize(("so", "sent"), [
    ({"regex": "[a-z]{1,4}( [a-z]{1,4})*"}, {"regex": "[a-z]{1,4}( [a-z]{1,4})*"}),
    ({"json": {"type": "object", "properties": {"a": {"type": "integer"}}}},
     {"json": {"type": "object", "properties": {"a": {"type": "integer"}}}}),
    ({"choice": ["yes", "no"]}, {"choice": ["yes", "no"]}),
    ({"grammar": 'root ::= "a" | "b"'}, {"grammar": 'root ::= "a" | "b"'}),
], ids=lambda v: next(iter(v)) if isinstance(v, dict) else "")
def test_body_carries_structured_outputs_as_vllm_takes_it(so: dict, sent: dict) -> None:
    """vLLM's completions request field ``structured_outputs`` (``StructuredOutputsParams``: one of regex, json,
    choice, grammar; a schema as an object, a choice as a list); absent without a grammar."""
    params = SamplingParams(max_new_tokens=2, tokenizer="bytes", structured_outputs=so)
    with FakeOpenAIServer() as server:
        engine_for(server).sample(SampleRequest(prompts=((1,),), params=params, n=1, seed=3))
        body = server.bodies[-1]
    assert body["structured_outputs"] == sent
    with FakeOpenAIServer() as server:
        engine_for(server).sample(SampleRequest(prompts=((1,),), params=SamplingParams(max_new_tokens=2), n=1, seed=3))
        assert "structured_outputs" not in server.bodies[-1]
