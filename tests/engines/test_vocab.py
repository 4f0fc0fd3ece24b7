"""Engines learn their vocabulary and EOS from the model, and errors name the option that fixes them.

A 32k-vocabulary model is the users' world: a plain function for such a model must be able to
declare it (attributes or options), HF engines and the openai engine must read it from the model
/ tokenizer, and every mismatch must say which option to set.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from speceq.core.params import SamplingParams
from speceq.engines.base import SampleRequest, batch_from_lists, validate_batch
from speceq.engines.function import FunctionEngine
from speceq.engines.openai import OpenAICompletionsEngine
from speceq.errors import ConfigError, EngineError
from speceq.inputs.cases import Case
from speceq.models.vocab import read_tokenizer

V = 32_000
EOS = 31_998


def uniform_32k(prompt_ids: list[int], n: int, params: SamplingParams, seed: int) -> list[list[int]]:
    """A plain sampling function of a '32k model': uniform tokens, EOS ends a row."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        row = []
        for _ in range(params.max_new_tokens):
            t = int(rng.integers(0, V))
            row.append(t)
            if t == EOS:
                break
        rows.append(row)
    return rows


def _with_attrs(fn, **attrs):  # a fresh function object per test so attributes do not leak
    def wrapped(prompt_ids, n, params, seed):
        return fn(prompt_ids, n, params, seed)

    for k, v in attrs.items():
        setattr(wrapped, k, v)
    return wrapped


def _write_wordlevel_tokenizer(folder: Path, size: int, eos: str | None, pad: str | None) -> None:
    from tokenizers import Tokenizer, models

    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(size)}, unk_token="t0"))
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast"}
    if eos:
        cfg["eos_token"] = eos
    if pad:
        cfg["pad_token"] = pad
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg), encoding="utf-8")


# ----- plain functions ---------------------------------------------------------------------------
def test_function_attributes_declare_the_vocabulary() -> None:
    engine = FunctionEngine(_with_attrs(uniform_32k, vocab_size=V, eos_token_id=EOS))
    assert (engine.vocab_size, engine.eos_token_id) == (V, EOS)
    assert (engine.vocab_source, engine.eos_source) == ("function attribute", "function attribute")
    assert engine.describe()["vocab_size"] == V


def test_options_win_over_function_attributes() -> None:
    engine = FunctionEngine(_with_attrs(uniform_32k, vocab_size=V, eos_token_id=EOS), vocab_size=V + 64, eos_token_id=None)
    assert (engine.vocab_size, engine.eos_token_id, engine.vocab_source) == (V + 64, None, "option")


def test_undeclared_function_gets_the_byte_defaults_and_says_so() -> None:
    engine = FunctionEngine(uniform_32k)
    assert (engine.vocab_size, engine.eos_token_id) == (259, 257)
    assert (engine.vocab_source, engine.eos_source) == ("default", "default")


def test_out_of_vocabulary_error_names_the_default_and_the_option() -> None:
    engine = FunctionEngine(uniform_32k)  # forgot to declare the 32k vocabulary
    request = SampleRequest(prompts=((1, 2),), params=SamplingParams(max_new_tokens=2, ignore_eos=True), n=1, seed=0)
    batch = batch_from_lists([[5, 31999]], request.rows(), 2)
    with pytest.raises(EngineError) as e:
        validate_batch(batch, request, engine, case_id="c", role="candidate")
    msg = str(e.value)
    assert "token 31999" in msg and "outside the candidate's vocabulary (259, the bundled byte model's default)" in msg
    assert "set --candidate-option vocab_size=" in msg and "position 1" in msg and "prompt index 0" in msg


def test_eos_errors_say_which_id_position_and_prompt() -> None:
    engine = FunctionEngine(_with_attrs(uniform_32k, vocab_size=V, eos_token_id=EOS))
    request = SampleRequest(prompts=((1,), (2,)), params=SamplingParams(max_new_tokens=3), n=1, seed=0)
    batch = batch_from_lists([[4, 5, 6], [7, EOS, 8]], request.rows(), 3)
    with pytest.raises(EngineError) as e:
        validate_batch(batch, request, engine, role="baseline")
    msg = str(e.value)
    assert f"EOS id {EOS}" in msg and "position 1" in msg and "(prompt 1, sample 0)" in msg
    assert "--baseline-option eos_token_id=" in msg
    # a row that stops early on a token that is not the declared EOS: suggests that token as EOS
    short = batch_from_lists([[4, 5, 6], [7, 2]], request.rows(), 3)
    with pytest.raises(EngineError) as e:
        validate_batch(short, request, engine, role="candidate")
    msg = str(e.value)
    assert "(prompt 1, sample 0)" in msg and "last token is 2" in msg and "set --candidate-option eos_token_id=2" in msg


def test_run_a_32k_plain_function_end_to_end(tmp_path: Path) -> None:
    """Two declared 32k functions run through ``speceq.run``: equal laws, no vocabulary error."""
    from speceq.pipeline.config import RunConfig
    from speceq.pipeline.runner import run

    fn = _with_attrs(uniform_32k, vocab_size=V, eos_token_id=EOS)
    engines = {"baseline": FunctionEngine(fn, name="base"), "candidate": FunctionEngine(fn, name="cand")}
    case = Case(case_id="u32k", prompt_ids=(31997, 17, 4000), params=SamplingParams(max_new_tokens=2), batch_size=4)
    config = RunConfig(oracle=False, samples=400, chunk_size=400, out_dir=tmp_path / "out", progress=False)
    result = run(config, [case], engines=engines)
    assert [c.case_id for c in result.cases] == ["u32k"]
    assert result.cases[0].verdict != "shifted"


def test_run_mismatch_names_the_option_to_set(tmp_path: Path) -> None:
    from speceq.pipeline.config import RunConfig
    from speceq.pipeline.runner import run

    declared = FunctionEngine(_with_attrs(uniform_32k, vocab_size=V, eos_token_id=EOS), name="base")
    undeclared = FunctionEngine(uniform_32k, name="cand")
    case = Case(case_id="u32k", prompt_ids=(31997,), params=SamplingParams(max_new_tokens=2))
    config = RunConfig(oracle=False, samples=10, chunk_size=10, out_dir=tmp_path / "out", progress=False)
    with pytest.raises(ConfigError) as e:
        run(config, [case], engines={"baseline": declared, "candidate": undeclared})
    msg = str(e.value)
    assert "vocabulary 259 (the bundled byte model's default)" in msg and "set --candidate-option vocab_size=32000" in msg


# ----- tokenizer files -----------------------------------------------------------------------------
def test_read_tokenizer_finds_size_eos_and_pad(tmp_path: Path) -> None:
    _write_wordlevel_tokenizer(tmp_path / "tok", V, eos="t31998", pad="t31999")
    vocab = read_tokenizer(tmp_path / "tok")
    assert (vocab.vocab_size, vocab.eos_token_id, vocab.pad_token_id) == (V, EOS, 31999)
    assert read_tokenizer(tmp_path / "tok" / "tokenizer.json").vocab_size == V
    with pytest.raises(ConfigError, match="no tokenizer.json"):
        read_tokenizer(tmp_path / "missing")


def test_openai_engine_reads_the_tokenizer(tmp_path: Path) -> None:
    _write_wordlevel_tokenizer(tmp_path / "tok", V, eos="t31998", pad=None)
    engine = OpenAICompletionsEngine("http://127.0.0.1:9", tokenizer=str(tmp_path / "tok"))
    assert (engine.vocab_size, engine.eos_token_id, engine.vocab_source) == (V, EOS, "tokenizer")
    assert engine.describe()["tokenizer"].endswith("tokenizer.json")
    explicit = OpenAICompletionsEngine("http://127.0.0.1:9", tokenizer=str(tmp_path / "tok"), eos_token_id="none")
    assert explicit.eos_token_id is None and explicit.vocab_size == V
    default = OpenAICompletionsEngine("http://127.0.0.1:9")
    assert (default.vocab_size, default.eos_token_id, default.vocab_source) == (259, 257, "default")
    with pytest.raises(EngineError, match=r"prompt 0 holds token 31000, outside .*259, the bundled byte model's "
                                          r"default.*tokenizer=PATH"):
        default.sample(SampleRequest(prompts=((31000,),), params=SamplingParams(), n=1, seed=0))


# ----- Hugging Face models -----------------------------------------------------------------------
def test_hf_engines_read_vocab_eos_and_pad_from_the_model(tmp_path: Path) -> None:
    """A 32k model whose config has no EOS/pad: both come from the tokenizer next to the weights."""
    import torch

    from speceq.engines.baseline import BaselineEngine
    from speceq.engines.hf import HFSampleEngine
    from speceq.models.hf_utils import tiny_random_llama

    torch.set_num_threads(1)
    model = tiny_random_llama(0, hidden_size=16, layers=1, heads=2, vocab_size=V, eos_token_id=EOS, pad_token_id=31999)
    model.config.eos_token_id = None
    model.config.pad_token_id = None
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = None
    folder = tmp_path / "m32k"
    model.save_pretrained(folder)
    _write_wordlevel_tokenizer(folder, V, eos="t31998", pad="t31999")
    base = BaselineEngine(str(folder))
    assert (base.vocab_size, base.eos_token_id, base.eos_source, base.pad_id) == (V, EOS, "tokenizer", 31999)
    hf = HFSampleEngine(base.model)  # a loaded model remembers its folder: the tokenizer is found there too
    assert (hf.vocab_size, hf.eos_token_id, hf.pad_token_id) == (V, EOS, 31999)
    request = SampleRequest(prompts=((31997, 5),), params=SamplingParams(max_new_tokens=2), n=3, seed=1)
    validate_batch(base.sample(request), request, base, role="baseline")


def _uniform_function_spec() -> str:
    return f"{Path(__file__).resolve()}:uniform_32k"


#: Every built-in engine (and a plain function), with the options that build it without a server or a download.
BUILTIN_SPECS = [
    ("baseline", {}), ("reference", {}), ("hf-sample", {}), ("hf-assisted", {}), ("hf-prompt-lookup", {}),
    ("mutant:bonus-from-draft", {}), ("openai", {"base_url": "http://127.0.0.1:9"}), ("function", {}),
]


@pytest.mark.parametrize("spec,options", BUILTIN_SPECS, ids=[s for s, _ in BUILTIN_SPECS])
@pytest.mark.parametrize("role", ["baseline", "candidate"])
def test_an_out_of_vocabulary_prompt_suggests_only_options_the_engine_takes(spec, options, role) -> None:
    """The hint of a prompt id outside the vocabulary names options that the same engine accepts when built."""
    import re

    from speceq.engines.registry import resolve_engine
    from speceq.pipeline.checks import check_case_vocabularies

    spec = _uniform_function_spec() if spec == "function" else spec
    engine = resolve_engine(spec, options=options)
    case = Case(case_id="huge-id", prompt_ids=(1, 10**6), params=SamplingParams(max_new_tokens=2))
    with pytest.raises(ConfigError, match=r"case 'huge-id'.prompt: token 1 is 1000000, outside the vocabulary") as e:
        wide = FunctionEngine(uniform_32k, vocab_size=2 * 10**6, eos_token_id=EOS)  # the other role fits the id
        check_case_vocabularies([case], {"baseline": wide, "candidate": wide, role: engine})
    msg = str(e.value)
    suggested = re.findall(rf"--{role}-option (\w+)=", msg)
    assert suggested, msg  # every hint names an option or says what to do instead
    for option in suggested:
        try:
            resolve_engine(spec, options={**options, option: "32000" if option == "vocab_size" else "no/such/model"})
        except (ConfigError, OSError) as built:  # a bad value is fine here; an unknown option is the defect
            assert "unknown option" not in str(built), f"{spec}: the hint suggests {option!r}: {msg}"
    if spec in ("baseline", "reference", "hf-sample", "hf-assisted", "hf-prompt-lookup", "mutant:bonus-from-draft"):
        assert suggested == ["target"] and "its model's" in msg and "tokenizer" in msg
    else:
        assert "vocab_size" in suggested
