"""structured_outputs: the case field, the llguidance bridge for several vocabularies, and its errors."""

from __future__ import annotations

import sys

import pytest

from speceq.core.params import SamplingParams
from speceq.errors import ConfigError
from speceq.inputs.cases import parse_cases
from speceq.models.grammar import Grammar, check_grammar, grammar_violation

pytest.importorskip("llguidance", reason="structured_outputs needs the 'structured' extra (llguidance)")


def test_the_four_kinds_parse_from_a_cases_file_and_round_trip() -> None:
    cases = parse_cases({"cases": [
        {"id": "re", "prompt": "x", "structured_outputs": {"regex": "[0-9]+"}},
        {"id": "js", "prompt": "x", "structured_outputs": {"json": {"type": "object", "required": ["a"],
                                                                    "properties": {"a": {"type": "integer"}}}}},
        {"id": "ch", "prompt": "x", "structured_outputs": {"choice": ["yes", "no"]}},
        {"id": "gr", "prompt": "x", "structured_outputs": {"grammar": 'root ::= "a" root | "b"'}},
    ]})
    kinds = [c.params.structured_outputs[0] for c in cases]
    assert kinds == ["regex", "json", "choice", "grammar"]
    assert all(c.params.tokenizer == "bytes" for c in cases)  # the grammar matches text: the case's tokenizer
    for c in cases:
        again = SamplingParams(**{k: v for k, v in c.params.to_dict().items()})
        assert again == c.params
        check_grammar(c.params, c.case_id)
    assert cases[2].params.to_dict()["structured_outputs"] == {"choice": ["yes", "no"]}


@pytest.mark.parametrize(("value", "message"), [
    ({"regex": "[a-"}, "cannot parse the regex: .*unclosed character class"),
    ({"grammar": "root ::= ("}, "cannot parse the grammar"),
    ({"json": {"type": "object", "properties": {"a": {"type": "nonsense"}}}}, "cannot parse the json"),
])
def test_an_unparseable_grammar_is_one_line_naming_case_and_field(value, message) -> None:
    (case,) = parse_cases([{"id": "c1", "prompt": "x", "structured_outputs": value}])
    with pytest.raises(ConfigError, match=message) as e:
        check_grammar(case.params, "c1")
    assert e.value.where == "case 'c1'.structured_outputs" and "\n" not in str(e.value)


@pytest.mark.parametrize(("value", "message"), [
    ({"regex": "a", "choice": ["a"]}, "exactly one of regex, json, choice, grammar"),
    ({"yaml": "a"}, "unknown kind 'yaml'"),
    ({"choice": []}, "non-empty list of non-empty strings"),
    ({"choice": "yes"}, "non-empty list of non-empty strings"),
    ({"json": "{not json"}, "not valid JSON"),
    ("[0-9]", "expected an object with exactly one of"),
])
def test_a_malformed_field_is_refused_when_the_file_is_read(value, message) -> None:
    with pytest.raises(ConfigError, match=message) as e:
        parse_cases([{"id": "c1", "prompt": "x", "structured_outputs": value}])
    assert "c1" in e.value.where and "structured_outputs" in e.value.where


def test_ignore_eos_with_a_grammar_is_refused() -> None:
    with pytest.raises(ConfigError, match="ignore_eos cannot be combined"):
        parse_cases([{"id": "c1", "prompt": "x", "ignore_eos": True, "structured_outputs": {"regex": "a+"}}])


def test_without_llguidance_the_error_names_the_extra(monkeypatch) -> None:
    import speceq.models.grammar as g

    monkeypatch.setitem(sys.modules, "llguidance", None)  # import fails as when it is not installed
    g._grammar_text.cache_clear()
    params = SamplingParams(tokenizer="bytes", structured_outputs={"regex": "[0-9]+x"})
    with pytest.raises(ConfigError, match=r'needs the llguidance package.*pip install "speceq\[structured\]"') as e:
        check_grammar(params, "c9")
    assert e.value.where == "case 'c9'.structured_outputs"


def _allowed_texts(tokenizer: str, vocab: int, eos: int) -> tuple[set[str], Grammar]:
    from tokenizers import Tokenizer

    from speceq.models.text_decoding import tokenizer_json

    grammar = Grammar(SamplingParams(tokenizer=tokenizer, structured_outputs={"choice": ["cat", "dog"]}), vocab, eos)
    tok = Tokenizer.from_file(str(tokenizer_json(tokenizer)))
    ids = grammar.row().mask().nonzero().flatten().tolist()
    return {tok.decode([i]) for i in ids}, grammar


def test_the_bridge_reads_the_bundled_bpe_vocabulary() -> None:
    texts, grammar = _allowed_texts("bpe", 32000, 2)
    assert {"cat", "dog", "c", "d"} <= texts and all("cat".startswith(t) or "dog".startswith(t) for t in texts)
    from tokenizers import Tokenizer

    from speceq.models.text_decoding import tokenizer_json

    tok = Tokenizer.from_file(str(tokenizer_json("bpe")))
    cat = tok.encode("cat", add_special_tokens=False).ids
    assert grammar_violation(grammar, [*cat, 2]) is None  # the engine's EOS (2 here) ends a complete row
    assert grammar_violation(grammar, tok.encode("cow", add_special_tokens=False).ids) is not None
    state = grammar.row()
    state.advance(cat)
    assert state.mask().nonzero().flatten().tolist() == [2]


def test_the_bridge_reads_a_hugging_face_tokenizer_smollm2() -> None:
    from speceq.models.named_tokenizers import named_tokenizer_folder

    try:
        named_tokenizer_folder("smollm2")
    except ConfigError:
        pytest.skip("the SmolLM2 tokenizer is not prepared on this machine (speceq smollm2 prepare)")
    texts, grammar = _allowed_texts("smollm2", 49152, 2)
    assert {"cat", "dog"} <= texts and all("cat".startswith(t) or "dog".startswith(t) for t in texts)


def test_a_tokenizer_larger_than_the_engine_vocabulary_is_refused() -> None:
    with pytest.raises(ConfigError, match="has 32000 tokens, more than the engine's vocabulary \\(259\\)"):
        Grammar(SamplingParams(tokenizer="bpe", structured_outputs={"regex": "a"}), 259, 257)
