"""Cases files: the format, every kind of error (naming file, case and field), fuzzing, defaults."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from speceq.core.params import SamplingParams
from speceq.errors import ConfigError
from speceq.inputs.cases import (
    CASE_FIELDS,
    SHARED_FIELDS,
    Case,
    cases_document,
    default_cases,
    load_cases,
    parse_cases,
    parse_cases_text,
)
from speceq.models.prompts import DEFAULT_PROMPTS
from speceq.models.tokenizer import VOCAB_SIZE, ByteTokenizer

REPO = Path(__file__).resolve().parents[2]
TOK = ByteTokenizer()


def write(tmp_path: Path, doc, name: str = "cases.json") -> Path:
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc), encoding="utf-8")
    return p


def test_json_cases_with_defaults_text_ids_and_companions(tmp_path):
    p = write(tmp_path, {
        "defaults": {"temperature": 0.7, "max_new_tokens": 6, "companions": ["ab"]},
        "cases": [
            {"id": "text", "prompt": "def f(x):"},
            {"id": "ids", "prompt_ids": [256, 100, 101], "temperature": 1, "top_k": 5, "top_p": 0.9,
             "ignore_eos": True, "batch_size": 4, "companions": ["abc", [256, 1, 2, 3, 4]]},
        ],
    })
    a, b = load_cases(p)
    assert a == Case(case_id="text", prompt_ids=tuple(TOK.encode("def f(x):")), text="def f(x):",
                     params=a.params, companions=(tuple(TOK.encode("ab")),))
    assert (a.params.temperature, a.params.max_new_tokens, a.params.top_k, a.batch_size) == (0.7, 6, 0, 1)
    assert b.prompt_ids == (256, 100, 101) and b.text is None
    assert (b.params.temperature, b.params.top_k, b.params.top_p, b.params.ignore_eos) == (1.0, 5, 0.9, True)
    assert b.batch_size == 4 and b.companions == (tuple(TOK.encode("abc")), (256, 1, 2, 3, 4))


def test_toml_is_the_same_as_json(tmp_path):
    toml = write(tmp_path, """
        [defaults]
        temperature = 0.7
        max_new_tokens = 6

        [[cases]]
        id = "text"
        prompt = "def f(x):"

        [[cases]]
        id = "ids"
        prompt_ids = [256, 100, 101]
        top_k = 5
        companions = ["abc", [1, 2]]
        batch_size = 2
    """, "cases.toml")
    js = write(tmp_path, {"defaults": {"temperature": 0.7, "max_new_tokens": 6}, "cases": [
        {"id": "text", "prompt": "def f(x):"},
        {"id": "ids", "prompt_ids": [256, 100, 101], "top_k": 5, "companions": ["abc", [1, 2]], "batch_size": 2}]})
    assert load_cases(toml) == load_cases(js)


def test_a_bare_list_of_cases_is_accepted():
    assert [c.case_id for c in parse_cases([{"id": "x", "prompt": "a"}, {"id": "y", "prompt_ids": [1]}])] == ["x", "y"]


def test_format_is_sniffed_for_other_suffixes(tmp_path):
    assert load_cases(write(tmp_path, '[{"id": "x", "prompt": "a"}]', "cases.txt"))[0].case_id == "x"
    assert load_cases(write(tmp_path, '[[cases]]\nid = "y"\nprompt = "b"\n', "cases.cfg"))[0].case_id == "y"


def test_the_example_file_loads():
    cases = load_cases(REPO / "examples" / "cases.json")
    assert len(cases) >= 3 and len({c.case_id for c in cases}) == len(cases)
    for c in cases:
        c.check_vocab(VOCAB_SIZE)


def test_named_tokenizer_file_relative_to_the_cases_file(tmp_path):
    from speceq.models.tokenizer import write_hf_tokenizer

    write_hf_tokenizer(tmp_path / "tok")
    cases = load_cases(write(tmp_path, {"defaults": {"tokenizer": "tok"}, "cases": [
        {"id": "x", "prompt": "héllo", "companions": ["ab"]}, {"id": "y", "prompt": "z", "tokenizer": "bytes"}]}))
    assert cases[0].prompt_ids == tuple(TOK.encode("héllo")) and cases[0].companions == (tuple(TOK.encode("ab")),)
    assert cases[1].prompt_ids == tuple(TOK.encode("z"))


# ----- errors: each names the file, the case (index and id) and the field -----

CASE_ERRORS = [
    ({"id": "c", "prompt": "a", "temprature": 1.0}, "temprature", r"unknown field 'temprature' \(did you mean 'temperature'\?\)"),
    ({"id": "c", "prompt": "a", "colour": 1}, "colour", r"unknown field 'colour'; expected one of id, prompt"),
    ({"id": "c", "prompt": ""}, "prompt", r"empty prompt"),
    ({"id": "c", "prompt_ids": []}, "prompt_ids", r"empty prompt"),
    ({"id": "c", "prompt": 5}, "prompt", r"expected a string, got int"),
    ({"id": "c", "prompt_ids": "abc"}, "prompt_ids", r"expected a list of token ids, got a string"),
    ({"id": "c", "prompt_ids": [1, "a"]}, "prompt_ids[1]", r"expected an integer >= 0, got a string 'a'"),
    ({"id": "c", "prompt_ids": [1, -2]}, "prompt_ids[1]", r"expected an integer in \[0, 2\*\*31\), got -2"),
    ({"id": "c", "prompt_ids": [2**40]}, "prompt_ids[0]", r"got 1099511627776"),
    ({"id": "c", "prompt": "a", "prompt_ids": [1]}, "prompt", r"exactly one of 'prompt' \(text\), 'prompt_ids' \(token ids\) and 'messages'"),
    ({"id": "c"}, "prompt", r"exactly one of 'prompt'"),
    ({"id": "c", "prompt": "a", "temperature": "hot"}, "temperature", r"expected a number, got a string 'hot'"),
    ({"id": "c", "prompt": "a", "temperature": -1}, "temperature", r"expected a finite number >= 0"),
    ({"id": "c", "prompt": "a", "temperature": True}, "temperature", r"expected a number, got a boolean"),
    ({"id": "c", "prompt": "a", "temperature": 10**400}, "temperature", r"number too large"),
    ({"id": "c", "prompt": "a", "temperature": math.nan}, "temperature", r"expected a finite number, got nan"),
    ({"id": "c", "prompt": "a", "top_k": 1.5}, "top_k", r"expected an integer >= 0, got float 1.5"),
    ({"id": "c", "prompt": "a", "top_p": 0}, "top_p", r"expected a number in \(0, 1\]"),
    ({"id": "c", "prompt": "a", "top_p": 1.5}, "top_p", r"expected a number in \(0, 1\]"),
    ({"id": "c", "prompt": "a", "max_new_tokens": 0}, "max_new_tokens", r"expected an integer in \[1, 2\*\*31\)"),
    ({"id": "c", "prompt": "a", "ignore_eos": "yes"}, "ignore_eos", r"expected true or false, got a string 'yes'"),
    ({"id": "c", "prompt": "a", "batch_size": 0}, "batch_size", r"expected an integer in \[1, 2\*\*31\), got 0"),
    ({"id": "c", "prompt": "a", "companions": "abc"}, "companions", r"expected a list of texts, token-id lists or chats"),
    ({"id": "c", "prompt": "a", "companions": [3]}, "companions[0]", r"expected a text, a list of token ids or a chat \(list of messages\), got int"),
    ({"id": "c", "prompt": "a", "companions": ["x", ""]}, "companions[1]", r"empty prompt"),
    ({"id": "c", "prompt": "a", "companions": [[1, True]]}, "companions[0][1]", r"expected an integer >= 0, got a boolean"),
    ({"id": "c", "prompt": "a", "tokenizer": "nope/missing"}, "tokenizer", r"neither a name \(bytes, bpe, smollm2\) nor an existing tokenizer.json"),
]


@pytest.mark.parametrize("bad,field,message", CASE_ERRORS, ids=[f"{i}-{e[1]}" for i, e in enumerate(CASE_ERRORS)])
def test_case_errors_name_file_case_and_field(tmp_path, bad, field, message):
    p = write(tmp_path, {"cases": [{"id": "ok", "prompt": "fine"}, bad]})
    with pytest.raises(ConfigError) as e:
        load_cases(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}: case 1 (id 'c'), field '{field}': "), msg
    assert e.value.where and str(p) in e.value.where
    import re

    assert re.search(message, msg), msg


@pytest.mark.parametrize("doc,where,message", [
    ('{"cases": [{"id": "x", "prompt": "a"},]}', "", r"malformed JSON at line 1, column 39: Expecting value"),
    ('{\n  "cases": [\n    {"id": "x" "prompt": "a"}\n  ]\n}', "", r"malformed JSON at line 3, column 16"),
    ('{"cases": [{"id": "x", "prompt": "a", "prompt": "b"}]}', "", r"duplicate key 'prompt'"),
    ('[' * 100000, "", r"nested too deeply|malformed JSON"),
    ('7', "", r"expected an object with a 'cases' list, got int"),
    ('{"cases": []}', ": field 'cases'", r"expected a non-empty list of cases, got an empty list"),
    ('{"case": []}', ": field 'case'", r"unknown field 'case' \(did you mean 'cases'\?\)"),
    ('{"defaults": {}}', ": field 'cases'", r"got nothing"),
    ('{"defaults": [], "cases": [{"id": "x", "prompt": "a"}]}', ": defaults", r"expected an object, got a list"),
    ('{"defaults": {"prompt": "a"}, "cases": [{"id": "x", "prompt": "a"}]}', ": defaults, field 'prompt'", r"unknown field 'prompt'"),
    ('{"cases": [3]}', ": case 0", r"expected an object with at least 'id' and 'prompt', got int"),
    ('{"cases": [{"prompt": "a"}]}', ": case 0, field 'id'", r"expected a non-empty printable string .* got None"),
    ('{"cases": [{"id": 5, "prompt": "a"}]}', ": case 0, field 'id'", r"got 5"),
    ('{"cases": [{"id": "a\\nb", "prompt": "a"}]}', ": case 0, field 'id'", r"printable"),
    ('{"cases": [{"id": "x", "prompt": "a"}, {"id": "x", "prompt": "b"}]}', ": case 1 (id 'x'), field 'id'",
     r"duplicate id: case 0 has the same id"),
], ids=lambda v: v[:24] if isinstance(v, str) else None)
def test_file_level_errors(tmp_path, doc, where, message):
    p = write(tmp_path, doc)
    with pytest.raises(ConfigError, match=message) as e:
        load_cases(p)
    assert str(e.value).startswith(f"{p}{where}"), str(e.value)


def test_toml_errors_name_file_line_and_field(tmp_path):
    p = write(tmp_path, '[[cases]]\nid = "x"\nprompt = "a"\ntop_k = \n', "bad.toml")
    with pytest.raises(ConfigError, match=r"bad.toml: malformed TOML: .*line 4"):
        load_cases(p)
    p = write(tmp_path, '[[cases]]\nid = "x"\nprompt = "a"\nignore_eos = 1979-05-27\n', "date.toml")
    with pytest.raises(ConfigError, match=r"date.toml: case 0 \(id 'x'\), field 'ignore_eos': expected true or false, got date"):
        load_cases(p)


def test_unreadable_files(tmp_path):
    with pytest.raises(ConfigError, match=r"missing.json: cannot read the cases file: No such file"):
        load_cases(tmp_path / "missing.json")
    p = tmp_path / "latin1.json"
    p.write_bytes(b'{"cases": [{"id": "x", "prompt": "caf\xe9"}]}')
    with pytest.raises(ConfigError, match=r"latin1.json: not UTF-8 text \(byte 37\)"):
        load_cases(p)
    with pytest.raises(ConfigError, match="unknown cases format 'yaml'"):
        parse_cases_text("{}", fmt="yaml")


# ----- fuzzing: anything but a valid file is a ConfigError, never another exception -----

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=6),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from([*CASE_FIELDS, "cases", "defaults", "x"]) | st.text(max_size=4), children, max_size=5),
    max_leaves=20,
)
plausible = {
    "prompt": st.text(min_size=1, max_size=8) | st.just(""),
    "prompt_ids": st.lists(st.integers(-3, 300), max_size=4),
    "messages": st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", ""]), "content": st.text(max_size=4)},
                                               optional={"rol": st.text(max_size=2)}), max_size=2),
    "temperature": st.floats(-1, 3) | st.integers(-1, 3),
    "top_k": st.integers(-2, 50),
    "top_p": st.floats(-0.5, 1.5),
    "max_new_tokens": st.integers(-1, 20),
    "ignore_eos": st.booleans(),
    "batch_size": st.integers(-1, 8),
    "companions": st.lists(st.text(max_size=4) | st.lists(st.integers(-1, 300), max_size=3), max_size=3),
    "tokenizer": st.just("bytes") | st.text(max_size=5),
    "samples": st.integers(-1, 5000) | st.none(),
    "min_p": st.floats(-0.5, 1.5),
    "repetition_penalty": st.floats(-1, 3),
    "presence_penalty": st.floats(-3, 3),
    "frequency_penalty": st.floats(-3, 3),
    "logit_bias": st.dictionaries(st.integers(-2, 300).map(str) | st.text(max_size=3),
                                  st.floats(-200, 200) | st.text(max_size=2), max_size=3),
    "processing": st.sampled_from(["vllm", "hf", "x"]),
    "stop": st.text(max_size=2) | st.lists(st.text(max_size=2) | st.integers(), max_size=3),
    "include_stop_str_in_output": st.booleans(),
    "seed": st.integers(-2, 2**31 + 1) | st.none(),
    "structured_outputs": st.dictionaries(st.sampled_from(["regex", "json", "choice", "grammar", "x"]),
                                          st.text(max_size=4) | st.lists(st.text(max_size=3), max_size=2)
                                          | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
                                          max_size=2),
}
ids = st.sampled_from(["a", "b", "c"]) | st.text(max_size=5) | st.integers()
others = {k: plausible[k] | json_values for k in CASE_FIELDS if k not in ("id", "prompt", "prompt_ids")}
case_like = (
    st.fixed_dictionaries({"id": st.sampled_from(["a", "b"]), "prompt": plausible["prompt"]}, optional=others)
    | st.fixed_dictionaries({"id": st.sampled_from(["a", "b"]), "prompt_ids": plausible["prompt_ids"]}, optional=others)
    | st.fixed_dictionaries({"id": ids}, optional={k: plausible[k] | json_values for k in CASE_FIELDS if k != "id"})
)
documents = st.fixed_dictionaries(
    {"cases": st.lists(case_like, min_size=1, max_size=3) | json_values},
    optional={"defaults": st.dictionaries(st.sampled_from(SHARED_FIELDS), st.one_of(*plausible.values()) | json_values)},
)


def _parse_or_config_error(call) -> None:
    try:
        result = call()
    except ConfigError:
        return
    assert isinstance(result, list) and result and all(isinstance(c, Case) for c in result)


FUZZ = settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(documents)
def test_fuzz_structured_documents(doc):
    _parse_or_config_error(lambda: parse_cases(doc, source="fuzz.json"))


@FUZZ
@given(json_values)
def test_fuzz_any_json_value(value):
    _parse_or_config_error(lambda: parse_cases(value))


@FUZZ
@given(st.text(max_size=80), st.sampled_from(["json", "toml"]))
def test_fuzz_raw_text(text, fmt):
    _parse_or_config_error(lambda: parse_cases_text(text, fmt=fmt))


@FUZZ
@given(documents)
def test_fuzz_serialised_documents(doc):
    text = json.dumps(doc)
    _parse_or_config_error(lambda: parse_cases_text(text, fmt="json"))
    _parse_or_config_error(lambda: parse_cases_text(text[: len(text) // 2], fmt="json"))


# ----- the default cases -----

def test_default_cases_cover_the_required_settings():
    cases = default_cases()
    assert len({c.prompt_ids for c in cases} | {p for c in cases for p in c.companions}) >= 6
    assert {c.text for c in cases} <= set(DEFAULT_PROMPTS)
    assert {c.params.temperature for c in cases} == {1.0, 0.7}
    assert sum(c.params.top_k > 0 for c in cases) >= 1 and sum(c.params.top_p < 1 for c in cases) >= 1
    assert {1, 4} <= {c.batch_size for c in cases}
    ragged = [c for c in cases if c.companions]
    assert len(ragged) >= 2 and any(c.batch_size == 4 for c in ragged)
    for c in cases:
        c.check_vocab(VOCAB_SIZE)
    for c in ragged:
        lengths = [len(p) for p in c.prompts]
        assert len(set(lengths)) == len(lengths) >= 2
        # the case's own prompt is shorter than some companion, so it is left-padded in its batches
        assert len(c.prompt_ids) < max(lengths)
    assert len({c.case_id for c in cases}) == len(cases)


def test_the_examples_in_docs_cases_md_parse():
    import re

    text = (REPO / "docs" / "reference" / "cases.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```(json|toml)\n(.*?)```", text, re.S)
    # the third (a chat) and the fourth (named tokenizers) need a tokenizer: tests/docs/test_cases_reference.py
    assert [fmt for fmt, _ in blocks] == ["json", "toml", "json", "json"]
    parsed = [parse_cases_text(body, fmt=fmt) for fmt, body in blocks[:2]]
    assert [c.case_id for c in parsed[1]] == [c.case_id for c in parsed[0]][:2]


@pytest.mark.parametrize("defaults,field,message", [
    ({"temperature": "hot"}, "temperature", "expected a number"),
    ({"companions": ["ok", ""]}, "companions[1]", "empty prompt"),
    ({"batch_size": 0}, "batch_size", r"expected an integer in \[1, 2\*\*31\)"),
])
def test_a_bad_default_is_reported_in_the_defaults_section(tmp_path, defaults, field, message):
    p = write(tmp_path, {"defaults": defaults, "cases": [{"id": "x", "prompt": "a"}]})
    with pytest.raises(ConfigError, match=message) as e:
        load_cases(p)
    assert str(e.value).startswith(f"{p}: defaults, field '{field}': ")


def test_per_case_samples_override_is_parsed_and_planned(tmp_path) -> None:
    """A case's own `samples` wins over the run's for that case only (and is validated)."""
    import json

    from fake_engines import FakeEngine

    from speceq.errors import ConfigError
    from speceq.inputs.cases import load_cases
    from speceq.pipeline.config import RunConfig
    from speceq.pipeline.plan import plan_chunks

    f = tmp_path / "c.json"
    f.write_text(json.dumps({"cases": [{"id": "few", "prompt": "a", "samples": 30}, {"id": "run", "prompt": "b"}]}))
    few, default = load_cases(f)
    assert few.samples == 30 and default.samples is None
    config = RunConfig(samples=50, chunk_size=20, out_dir=tmp_path / "out")
    engines = {"baseline": FakeEngine(), "candidate": FakeEngine()}
    planned = {}
    for chunk in plan_chunks(config, [few, default], engines):
        planned[(chunk.role, chunk.case.case_id)] = planned.get((chunk.role, chunk.case.case_id), 0) + chunk.n
    assert planned == {("baseline", "few"): 30, ("candidate", "few"): 30, ("baseline", "run"): 50, ("candidate", "run"): 50}
    f.write_text(json.dumps({"cases": [{"id": "bad", "prompt": "a", "samples": 0}]}))
    with pytest.raises(ConfigError, match="samples"):
        load_cases(f)


def test_cases_document_reads_back_as_the_same_cases():
    """Built-in cases as a cases file (token ids), e.g. SmolLM2's for a tool that takes --cases."""

    from speceq.inputs.cases import bpe_cases, cases_document

    for cases in (default_cases(), bpe_cases()):
        assert parse_cases(cases_document(cases)) == [dataclasses.replace(c, text=None) for c in cases]


def test_request_fields_parse_from_json_and_toml(tmp_path):
    doc = {"defaults": {"min_p": 0.05, "logit_bias": {"10": 3.0}},
           "cases": [{"id": "a", "prompt_ids": [1, 2], "repetition_penalty": 1.2, "presence_penalty": 0.5,
                      "frequency_penalty": 0.25, "processing": "vllm"},
                     {"id": "b", "prompt_ids": [1], "processing": "hf", "logit_bias": {"11": -100}}]}
    a, b = load_cases(write(tmp_path, doc))
    assert (a.params.min_p, a.params.repetition_penalty, a.params.presence_penalty, a.params.frequency_penalty) == (
        0.05, 1.2, 0.5, 0.25)
    assert a.params.logit_bias == ((10, 3.0),) and b.params.logit_bias == ((11, -100.0),)
    assert b.params.processing == "hf"
    toml = write(tmp_path, """
        [[cases]]
        id = "a"
        prompt_ids = [1, 2]
        min_p = 0.05
        repetition_penalty = 1.2
        presence_penalty = 0.5
        frequency_penalty = 0.25
        logit_bias = {"10" = 3.0}
    """, "cases.toml")
    (t,) = load_cases(toml)
    assert t.params == a.params
    # the stored form reads back as the same case (results, fingerprints)
    again = parse_cases([{"id": "a", "prompt_ids": [1, 2], **a.to_dict()["params"]}])[0]
    assert again.params == a.params


def test_request_fields_from_marker_keywords_with_int_keys():
    """The pytest marker passes Python keywords: ``logit_bias={10: 3.0}`` with int keys."""
    (c,) = parse_cases([{"id": "m", "prompt_ids": [1], "logit_bias": {10: 3.0}, "min_p": 0.2}],
                       source="test_x.py::t: speceq_case marker")
    assert c.params.logit_bias == ((10, 3.0),) and c.params.min_p == 0.2


@pytest.mark.parametrize(("field", "value", "text"), [
    ("min_p", 1.5, "expected a number in [0, 1]"),
    ("min_p", "high", "expected a number, got a string"),
    ("repetition_penalty", 0, "expected a number > 0"),
    ("repetition_penalty", -0.5, "expected a number > 0"),
    ("presence_penalty", 3, "expected a number in [-2, 2]"),
    ("logit_bias", [1, 2], "expected an object {token id: bias}"),
    ("logit_bias", {"a": 1}, "key 'a' is not a token id"),
    ("logit_bias", {"1": "big"}, "expected a number, got a string"),
    ("logit_bias", {"1": 500}, "expected a number in [-100, 100]"),
    ("processing", "sglang", "expected one of 'vllm', 'hf'"),
    ("stop", [], "empty stop list"),
    ("stop", ["\n", ""], "stop string 1 is a string ''; expected a non-empty string"),
    ("stop", {"a": 1}, "expected a string or a list of strings"),
    ("stop", ["x", "x"], "stop string 'x' is given twice"),
    ("include_stop_str_in_output", "yes", "expected true or false"),
])
def test_request_field_errors_name_file_case_and_field(tmp_path, field, value, text):
    p = write(tmp_path, {"cases": [{"id": "ok", "prompt_ids": [1]}, {"id": "bad", "prompt_ids": [1], field: value}]})
    with pytest.raises(ConfigError) as e:
        load_cases(p)
    msg = str(e.value)
    assert text in msg and f"case 1 (id 'bad'), field '{field}'" in msg and "\n" not in msg


def test_logit_bias_key_outside_the_vocabulary_names_case_and_field():
    (c,) = parse_cases([{"id": "big-key", "prompt_ids": [1], "logit_bias": {str(VOCAB_SIZE): 1.0}}])
    with pytest.raises(ConfigError) as e:
        c.check_vocab(VOCAB_SIZE)
    assert e.value.where == "case 'big-key'.logit_bias" and f"key {VOCAB_SIZE} is outside" in str(e.value)
    c2 = parse_cases([{"id": "ok", "prompt_ids": [1], "logit_bias": {str(VOCAB_SIZE - 1): 1.0}}])[0]
    c2.check_vocab(VOCAB_SIZE)


def test_the_tokenizer_name_is_display_only_and_keeps_the_store_keys(tmp_path):
    """A case that names its tokenizer (kept for the faces' token text, #47) reuses the samples stored without it."""

    from fake_engines import FakeEngine

    from speceq.pipeline.config import RunConfig
    from speceq.pipeline.plan import plan_chunks

    f = tmp_path / "c.json"
    f.write_text(json.dumps({"cases": [{"id": "a", "prompt": "def ", "tokenizer": "bytes"}]}))
    named = load_cases(f)[0]
    assert named.tokenizer == "bytes" and named.to_dict()["tokenizer"] == "bytes"
    config = RunConfig(samples=40, chunk_size=20, out_dir=tmp_path / "out")
    engines = {"baseline": FakeEngine(), "candidate": FakeEngine()}
    keys = [c.key for c in plan_chunks(config, [named], engines)]
    assert keys == [c.key for c in plan_chunks(config, [dataclasses.replace(named, tokenizer=None)], engines)]


def test_stop_fields_parse_and_carry_the_cases_tokenizer(tmp_path):
    doc = {"defaults": {"include_stop_str_in_output": True},
           "cases": [{"id": "a", "prompt": "def f", "stop": ["\n", "return"]},
                     {"id": "b", "prompt": "x", "stop": "\n\n", "tokenizer": "bytes"},
                     {"id": "c", "prompt": "x"}]}
    a, b, c = load_cases(write(tmp_path, doc))
    assert a.params.stop == ("\n", "return") and a.params.include_stop_str_in_output
    assert a.params.tokenizer == "bytes"  # the default tokenizer decodes the rows
    assert b.params.stop == ("\n\n",)
    assert c.params.stop == () and c.params.tokenizer is None and "tokenizer" not in c.to_dict()["params"]
    again = parse_cases([{"id": "a", "prompt_ids": list(a.prompt_ids), **a.to_dict()["params"]}])[0]
    assert again.params == a.params
    back = parse_cases(cases_document([a, b, c]))
    assert [(x.case_id, x.prompt_ids, x.params) for x in back] == [(x.case_id, x.prompt_ids, x.params) for x in (a, b, c)]


def test_a_stop_case_on_a_tokenizer_file_stores_its_absolute_path(tmp_path):
    from speceq.models.bpe import BPE_TARGET_DIR

    (c,) = parse_cases([{"id": "p", "prompt": "x", "stop": ["\n"], "tokenizer": str(BPE_TARGET_DIR)}],
                       base_dir=tmp_path)
    assert c.params.tokenizer == str((BPE_TARGET_DIR / "tokenizer.json").resolve())


def test_stop_without_a_tokenizer_is_refused():
    with pytest.raises(ConfigError, match="stop strings are matched on each row's decoded text, so the case needs "
                                          "a tokenizer") as e:
        SamplingParams(stop=("x",))
    assert e.value.where == "stop"  # a cases file always names a tokenizer (default 'bytes'): see above


def test_a_stop_case_decoded_with_the_byte_tokenizer_is_refused_on_a_larger_vocabulary():
    (c,) = parse_cases([{"id": "bpe-ids", "prompt_ids": [1, 2], "stop": ["\n"]}])
    c.check_vocab(VOCAB_SIZE)
    with pytest.raises(ConfigError, match="decoded with the byte tokenizer .* vocabulary has 32000") as e:
        c.check_vocab(32000)
    assert e.value.where == "case 'bpe-ids'.tokenizer"
    parse_cases([{"id": "no-stop", "prompt_ids": [1, 2]}])[0].check_vocab(32000)


def test_stop_from_marker_keywords_takes_a_tuple_too():
    (c,) = parse_cases([{"id": "m", "prompt_ids": [1], "stop": ("\n", "##"), "seed": 5}],
                       source="test_x.py::t: speceq_case marker")
    assert c.params.stop == ("\n", "##") and c.params.seed == 5
