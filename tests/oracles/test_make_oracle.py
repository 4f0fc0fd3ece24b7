"""make_oracle: the oracle never casts an engine's model in place; the server oracle wired end to end."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from fake_logprob_server import serve_logprobs

from speceq.core.params import SamplingParams
from speceq.engines.baseline import BaselineEngine
from speceq.errors import ConfigError
from speceq.inputs.cases import Case
from speceq.models import ByteTokenizer
from speceq.oracles.build import make_oracle
from speceq.pipeline.config import RunConfig
from speceq.pipeline.runner import run
from speceq.verdicts.reasons import note_lines

PROMPT = tuple(ByteTokenizer().encode("def add(a, b):\n    return "))


@pytest.fixture(scope="module")
def engine() -> BaselineEngine:
    torch.set_num_threads(1)
    return BaselineEngine()


def test_bf16_baseline_model_is_not_cast_by_the_oracle() -> None:
    torch.set_num_threads(1)
    bf16 = BaselineEngine(dtype="bfloat16")
    engines = {"baseline": bf16, "candidate": bf16}
    weight = next(bf16.model.parameters())
    oracle = make_oracle(RunConfig(oracle_draft=None).oracle_spec(), engines)
    assert next(bf16.model.parameters()) is weight and weight.dtype == torch.bfloat16  # untouched
    assert oracle.model is not bf16.model and next(oracle.model.parameters()).dtype == torch.float32
    same = make_oracle(RunConfig(oracle_draft=None, oracle_dtype="bfloat16").oracle_spec(), engines)
    assert same.model is bf16.model  # already in the oracle's dtype: shared, not copied


def test_run_config_checks_the_server_options() -> None:
    with pytest.raises(ConfigError, match="run.oracle_server"):
        RunConfig(oracle_server="127.0.0.1:8000")
    with pytest.raises(ConfigError, match="run.oracle_top_logprobs.*without oracle_server"):
        RunConfig(oracle_top_logprobs=20)
    with pytest.raises(ConfigError, match="run.oracle_model"):
        RunConfig(oracle_server="http://127.0.0.1:1", oracle_model="somewhere")
    with pytest.raises(ConfigError, match="run.oracle_dtype"):
        RunConfig(oracle_dtype="int8")


def test_run_with_the_server_oracle(engine, tmp_path) -> None:
    """Whole vocabulary: the same oracle tests as transformers. Top-3 of a T=1 case: the
    log-likelihood tests are not run and the note says so. A case top-3 cannot score is refused
    before anything is sampled."""
    case = Case(case_id="t1", prompt_ids=PROMPT, params=SamplingParams(max_new_tokens=4), batch_size=50)
    engines = {"baseline": engine, "candidate": engine}
    common = {"samples": 100, "chunk_size": 100, "progress": False, "oracle_draft": None}
    with serve_logprobs(engine.model, max_logprobs=-1) as server:
        full = run(RunConfig(out_dir=tmp_path / "all", oracle_server=server.url, **common), [case], engines=engines)
        top = run(RunConfig(out_dir=tmp_path / "top", oracle_server=server.url, oracle_top_logprobs=3, **common),
                  [case], engines=engines)
        cool = Case(case_id="cool", prompt_ids=PROMPT, params=SamplingParams(temperature=0.7, max_new_tokens=4))
        with pytest.raises(ConfigError, match="case 'cool'.*temperature=0.7 without top_k"):
            run(RunConfig(out_dir=tmp_path / "cool", oracle_server=server.url, oracle_top_logprobs=3, **common),
                [cool], engines=engines)
    assert not list((tmp_path / "cool").rglob("*.npz"))
    ref = run(RunConfig(out_dir=tmp_path / "ref", **common), [case], engines=engines)
    names = {t.name for t in full.cases[0].tests if t.family == "oracle"}
    assert names == {t.name for t in ref.cases[0].tests if t.family == "oracle"}
    for t_full in full.cases[0].tests:  # same samples (same seeds): same p-values as the transformers oracle
        t_ref = next(t for t in ref.cases[0].tests if t.name == t_full.name)
        assert np.isclose(t_full.pvalue, t_ref.pvalue, rtol=1e-4, atol=1e-9), t_full.name
    top_names = {t.name for t in top.cases[0].tests if t.family == "oracle"}
    assert top_names == names - {"z temperature drift", "baseline z temperature drift", "chi2 GOF first token"}
    compared = {t.name for t in full.cases[0].tests if t.family == "oracle comparison"}
    assert {t.name for t in top.cases[0].tests if t.family == "oracle comparison"} == compared - {"log-likelihood comparison"}
    assert any("'z temperature drift'" in n and "not run" in n for n in note_lines(top.cases[0].notes))
    assert full.cases[0].verdict != "shifted" and top.cases[0].verdict != "shifted"


def test_an_hf_baseline_gives_the_oracle_its_target_model() -> None:
    """hf-* engines keep their model as ``.target`` (speceq's own as ``.model``): the oracle's default
    target is that model, not the bundled one (a run with an hf-sample baseline on another vocabulary
    used to fail on the draft's vocabulary, 49 152 vs the bundled 259)."""
    from speceq.engines.hf import HFAssistedEngine, HFSampleEngine
    from speceq.models.hf_utils import tiny_random_llama
    from speceq.oracles.build import oracle_sources

    torch.set_num_threads(1)
    model = tiny_random_llama(0, vocab_size=300, eos_token_id=299, pad_token_id=298)
    draft = tiny_random_llama(1, layers=1, vocab_size=300, eos_token_id=299, pad_token_id=298)
    engines = {"baseline": HFSampleEngine(model), "candidate": HFAssistedEngine(model, draft)}
    oracle = make_oracle(RunConfig().oracle_spec(), engines)
    assert oracle.model is model and oracle.draft is draft and oracle.vocab_size == 300
    target, _ = oracle_sources(RunConfig().oracle_spec(), engines)
    assert (target.engine_role, target.engine_attribute) == ("baseline", "target")
