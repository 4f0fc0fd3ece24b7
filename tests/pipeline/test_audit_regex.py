"""The audit's ``regex`` setting (structured output) and request fields a method refuses (``not supported``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from speceq.pipeline.audit import (
    AUDIT_REGEX,
    FIELD_SETTINGS,
    NOT_SUPPORTED,
    RAN,
    SETTINGS,
    SHAPES,
    AuditMethod,
    AuditPlan,
    pick,
    pick_settings,
    run_audit,
)
from speceq.pipeline.config import RunConfig

FAKE = "fake_engines:FakeEngine"


def plan(out: Path, methods: list[AuditMethod], settings: tuple[str, ...], baseline: str = FAKE) -> AuditPlan:
    run = RunConfig(oracle=False, samples=60, chunk_size=60, seed=3, progress=False, workers=1)
    return AuditPlan(family="fake", baseline=baseline, methods=tuple(methods), prompt_ids=(1, 2, 3),
                     companion_ids=(4, 5, 6, 1, 2), settings=pick_settings(list(settings)),
                     shapes=pick(SHAPES, ["single"], "shape"), run=run, out_dir=out, processing="hf")


def test_the_regex_setting_runs_when_named_with_each_worlds_tokenizer(tmp_path: Path) -> None:
    """Named only (not among the default settings); its case takes the plan's processing order and the
    tokenizer of the plan's world (the byte vocabulary for byte, mtp and gemma4; bytes without a world)."""
    assert "regex" in {s.name for s in FIELD_SETTINGS} and "regex" not in {s.name for s in SETTINGS}
    p = plan(tmp_path, [AuditMethod("m", FAKE)], ("regex",))
    (regex,) = p.settings
    assert regex.params.max_new_tokens == 8 and regex.params.structured_outputs == ("regex", AUDIT_REGEX)
    tokenizers = {}
    for world in (None, "byte", "mtp", "gemma4", "bpe", "smollm2"):
        params = replace(p, world=world).case(regex, SHAPES[0]).params
        assert params.processing == "hf" and params.structured_outputs == ("regex", AUDIT_REGEX)
        tokenizers[world] = params.tokenizer
    assert tokenizers == {None: "bytes", "byte": "bytes", "mtp": "bytes", "gemma4": "bytes", "bpe": "bpe",
                          "smollm2": "smollm2"}
    assert replace(p, processing="vllm").case(regex, SHAPES[0]).params.processing == "vllm"


@pytest.mark.parametrize("tokenizer", ["bytes", "bpe"])
def test_the_regex_compiles_for_the_worlds_vocabularies_and_its_state_matters(tokenizer: str) -> None:
    """The grammar compiles against the byte and BPE vocabularies, which both spell it; after four letters only a
    space (or the end) may follow, after a space only a letter: the state decides at every token."""
    pytest.importorskip("llguidance", reason="the regex setting needs the 'structured' extra (llguidance)")
    from speceq.models.grammar import Grammar, grammar_violation

    (regex,) = pick_settings(["regex"])
    params = replace(regex.params, tokenizer=tokenizer)
    grammar = Grammar(params, None, None)
    encode = _encoder(tokenizer)
    assert grammar_violation(grammar, encode("ab cd efgh")) is None
    assert grammar_violation(grammar, encode("abcde")) is not None  # five letters
    assert grammar_violation(grammar, encode("ab  cd")) is not None  # two spaces
    assert grammar_violation(grammar, encode("Ab")) == 0  # not lowercase


def _encoder(tokenizer: str):
    if tokenizer == "bytes":
        return lambda text: list(text.encode())
    from transformers import AutoTokenizer

    from speceq.models.bpe import BPE_TARGET_DIR

    tok = AutoTokenizer.from_pretrained(str(BPE_TARGET_DIR), local_files_only=True)
    return lambda text: tok(text, add_special_tokens=False)["input_ids"]


def test_a_method_that_refuses_a_field_is_not_supported_and_the_others_run(tmp_path: Path) -> None:
    """A method that declares it cannot apply a setting's field: ``not supported`` with its refusal (naming the case,
    the field and the engine), before anything is sampled; a method that declares it runs."""
    methods = [AuditMethod("plain", FAKE), AuditMethod("minp", "audit_fakes:MinPFake")]
    result = run_audit(plan(tmp_path, methods, ("minp01",), baseline="audit_fakes:MinPFake"), log=lambda _: None)
    plain, minp = result.cell("plain", "minp01", "single"), result.cell("minp", "minp01", "single")
    assert plain.status == NOT_SUPPORTED and plain.verdict is None
    assert plain.reason.startswith("case 'minp01-single'.min_p: the candidate engine 'fake' cannot apply min_p")
    assert not (tmp_path / "cells" / "plain" / "minp01-single" / "chunks" / "candidate").exists()
    assert minp.status == RAN and minp.verdict is not None
