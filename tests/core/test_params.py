"""SamplingParams: the request fields beyond temperature / top-k / top-p, their ranges and their stored form."""

from __future__ import annotations

import json

import pytest

from speceq.core.params import SamplingParams
from speceq.errors import ConfigError


def test_defaults_are_off_and_leave_the_stored_form_unchanged() -> None:
    p = SamplingParams()
    assert p.extra_fields == () and not p.uses_history
    # the stored form of a case without the new fields is what it was before they existed
    assert p.to_dict() == {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "max_new_tokens": 8, "ignore_eos": False}


def test_new_fields_round_trip_through_json() -> None:
    p = SamplingParams(min_p=0.1, repetition_penalty=1.3, presence_penalty=0.5, frequency_penalty=-0.25,
                       logit_bias={7: 2.5, "3": -1}, processing="vllm")
    doc = json.loads(json.dumps(p.to_dict()))
    assert doc["logit_bias"] == {"3": -1.0, "7": 2.5}
    assert SamplingParams(**doc) == p
    assert p.logit_bias == ((3, -1.0), (7, 2.5))
    assert set(p.extra_fields) == {"min_p", "repetition_penalty", "presence_penalty", "frequency_penalty",
                                   "logit_bias"}
    assert p.uses_history and hash(p) == hash(SamplingParams(**doc))
    assert "min_p=0.1" in p.label() and "logit_bias=2" in p.label()
    assert SamplingParams(processing="hf").to_dict()["processing"] == "hf"


@pytest.mark.parametrize(("kwargs", "field", "text"), [
    ({"min_p": 1.5}, "min_p", "[0, 1]"),
    ({"min_p": -0.1}, "min_p", "[0, 1]"),
    ({"repetition_penalty": 0.0}, "repetition_penalty", "> 0"),
    ({"repetition_penalty": -1.0}, "repetition_penalty", "> 0"),
    ({"repetition_penalty": float("inf")}, "repetition_penalty", "> 0"),
    ({"presence_penalty": 2.5}, "presence_penalty", "[-2, 2]"),
    ({"frequency_penalty": -3}, "frequency_penalty", "[-2, 2]"),
    ({"logit_bias": {"x": 1.0}}, "logit_bias", "not a token id"),
    ({"logit_bias": {-1: 1.0}}, "logit_bias", "not a token id"),
    ({"logit_bias": {1: 101.0}}, "logit_bias", "[-100, 100]"),
    ({"logit_bias": {1: 1.0, "1": 2.0}}, "logit_bias", "given twice"),
    ({"logit_bias": 3}, "logit_bias", "expected an object"),
    ({"processing": "sglang"}, "processing", "'vllm', 'hf'"),
    ({"processing": "hf", "presence_penalty": 0.5}, "presence_penalty", "transformers has none"),
])
def test_out_of_range_values_name_the_field(kwargs, field, text) -> None:
    with pytest.raises(ConfigError) as e:
        SamplingParams(**kwargs)
    assert e.value.where == field and text in str(e.value)
    assert "\n" not in str(e.value)
