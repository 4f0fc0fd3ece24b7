"""The BPE world: its tokenizer, bundled models, metrics, cases, engine wiring and first-token laws."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from speceq.errors import ConfigError
from speceq.inputs.cases import bpe_cases
from speceq.models.bpe import (
    BPE_BOS_ID,
    BPE_DRAFT_DIR,
    BPE_EOS_ID,
    BPE_METRICS_PATH,
    BPE_PAD_ID,
    BPE_TARGET_DIR,
    BPE_VOCAB_SIZE,
    first_token_laws,
    load_bpe_draft,
    load_bpe_target,
    load_bpe_tokenizer,
)
from speceq.models.worlds import world_engine_options


@pytest.fixture(scope="module")
def bpe_target() -> torch.nn.Module:
    torch.set_num_threads(1)
    return load_bpe_target()


def test_tokenizer_has_32000_tokens_with_specials_at_the_end() -> None:
    tok = load_bpe_tokenizer()
    assert tok.get_vocab_size() == BPE_VOCAB_SIZE == 32_000
    assert [tok.token_to_id(s) for s in ("<bos>", "<eos>", "<pad>")] == [BPE_BOS_ID, BPE_EOS_ID, BPE_PAD_ID]
    text = "def __init__(self, key):\n    return self._data[key]\n"
    enc = tok.encode(text)
    assert enc.ids[0] == BPE_BOS_ID and len(enc.ids) < len(text) / 2  # real merges: < 2 bytes per token
    assert tok.decode(enc.ids) == text
    # both folders carry the same tokenizer
    assert (BPE_TARGET_DIR / "tokenizer.json").read_bytes() == (BPE_DRAFT_DIR / "tokenizer.json").read_bytes()


def test_bundled_weights_are_small_tied_and_load_as_float32(bpe_target: torch.nn.Module) -> None:
    sizes = [(d / "model.safetensors").stat().st_size for d in (BPE_TARGET_DIR, BPE_DRAFT_DIR)]
    assert sum(sizes) <= 20 * 2**20
    draft = load_bpe_draft()
    for model in (bpe_target, draft):
        assert model.config.vocab_size == BPE_VOCAB_SIZE and model.config.tie_word_embeddings
        assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
        assert next(model.parameters()).dtype == torch.float32
        assert (model.config.eos_token_id, model.config.pad_token_id) == (BPE_EOS_ID, BPE_PAD_ID)


def test_metrics_record_a_trained_pair() -> None:
    m = json.loads(BPE_METRICS_PATH.read_text(encoding="utf-8"))
    target, draft, rand = (m["models"][k] for k in ("target", "draft", "random_init_target"))
    assert m["vocab_size"] == BPE_VOCAB_SIZE
    assert target["heldout_loss"] < draft["heldout_loss"] < rand["heldout_loss"]
    assert target["heldout_loss"] < np.log(BPE_VOCAB_SIZE) - 3  # far better than uniform (10.37 nats)
    assert 0.2 < m["acceptance"]["T=1"] < 1.0
    assert m["training"]["settings"]["seed"] == 0


def test_first_token_laws_are_32k_probability_vectors(bpe_target: torch.nn.Module) -> None:
    laws = first_token_laws(["def "], temperatures=(1.0, 0.7), model=bpe_target)
    p1, p07 = laws[("def ", 1.0)], laws[("def ", 0.7)]
    assert p1.shape == (BPE_VOCAB_SIZE,) and abs(p1.sum() - 1) < 1e-9 and abs(p07.sum() - 1) < 1e-9
    entropy = lambda p: float(-(p[p > 0] * np.log(p[p > 0])).sum())  # noqa: E731
    assert entropy(p07) < entropy(p1)  # a lower temperature sharpens the law
    top = first_token_laws(["def "], temperatures=(1.0,), top_k=50, model=bpe_target)[("def ", 1.0)]
    assert np.count_nonzero(top) == 50


def test_bpe_cases_fit_the_vocabulary_and_not_the_byte_one() -> None:
    cases = bpe_cases()
    assert {c.batch_size for c in cases} == {1, 4, 32}
    assert {c.params.temperature for c in cases} == {1.0, 0.7}
    assert any(c.params.top_k for c in cases) and any(c.params.top_p < 1 for c in cases)
    for c in cases:
        c.check_vocab(BPE_VOCAB_SIZE)
        assert c.prompt_ids[0] == BPE_BOS_ID
    with pytest.raises(ConfigError, match="outside the vocabulary"):
        for c in cases:
            c.check_vocab(259)


def test_world_options_fill_only_what_the_user_left_out() -> None:
    assert world_engine_options("byte", "reference", {"k": 2}) == {"k": 2}
    ref = world_engine_options("bpe", "reference", {"k": 2})
    assert ref == {"k": 2, "target": str(BPE_TARGET_DIR), "draft": str(BPE_DRAFT_DIR)}
    assert world_engine_options("bpe", "baseline", {"target": "/x"}) == {"target": "/x"}
    assert world_engine_options("bpe", "mutant:draft-is-target", {}) == {"target": str(BPE_TARGET_DIR)}
    assert world_engine_options("bpe", "openai", {}) == {"tokenizer": str(BPE_TARGET_DIR)}
    assert world_engine_options("bpe", "my_pkg:engine", {}) == {}
    with pytest.raises(ConfigError, match="unknown model world"):
        world_engine_options("wordpiece", "baseline", {})


def test_engines_learn_the_bpe_vocabulary(bpe_target: torch.nn.Module) -> None:
    from speceq.engines.baseline import BaselineEngine
    from speceq.engines.openai import OpenAICompletionsEngine

    base = BaselineEngine(bpe_target)
    assert (base.vocab_size, base.eos_token_id, base.pad_id) == (BPE_VOCAB_SIZE, BPE_EOS_ID, BPE_PAD_ID)
    remote = OpenAICompletionsEngine("http://127.0.0.1:9", tokenizer=str(BPE_TARGET_DIR))
    assert (remote.vocab_size, remote.eos_token_id) == (BPE_VOCAB_SIZE, BPE_EOS_ID)


def test_the_oracle_masks_the_bpe_eos(bpe_target: torch.nn.Module) -> None:
    """ignore_eos masks id 31998 (the model's EOS), not the byte model's 257."""
    from speceq.core.params import SamplingParams
    from speceq.oracles.hf import TargetOracle

    oracle = TargetOracle(bpe_target)
    assert oracle.eos_token_id == BPE_EOS_ID
    (case,) = [c for c in bpe_cases() if c.case_id == "bpe-ignore-eos-t07-b4"]
    probs = oracle.next_token_probs([list(case.prompt_ids)], SamplingParams(temperature=0.7, ignore_eos=True))[0]
    free = oracle.next_token_probs([list(case.prompt_ids)], SamplingParams(temperature=0.7))[0]
    assert probs[BPE_EOS_ID] == 0 and free[BPE_EOS_ID] > 0 and probs[257] > 0


def test_bpe_world_black_box_run(tmp_path: Path, bpe_target: torch.nn.Module) -> None:
    """baseline vs reference on the ignore_eos BPE case, 1 new token, 200 samples, no oracle: not 'shifted'."""
    import dataclasses

    from speceq.engines.baseline import BaselineEngine
    from speceq.engines.reference import ReferenceSpeculativeEngine
    from speceq.pipeline.config import RunConfig
    from speceq.pipeline.runner import run

    (case,) = [c for c in bpe_cases() if c.case_id == "bpe-ignore-eos-t07-b4"]
    case = dataclasses.replace(case, params=dataclasses.replace(case.params, max_new_tokens=1))
    engines = {"baseline": BaselineEngine(bpe_target), "candidate": ReferenceSpeculativeEngine(bpe_target, BPE_DRAFT_DIR)}
    config = RunConfig(samples=200, chunk_size=200, out_dir=tmp_path / "out", progress=False, oracle=False)
    (res,) = run(config, [case], engines=engines).cases
    assert res.verdict != "shifted", res.summary()
    assert res.candidate_tokens == 200 * (1 + len(case.companions))  # ignore_eos: every row has 1 token


@pytest.mark.slow
def test_bpe_world_runs_baseline_against_reference(tmp_path: Path, bpe_target: torch.nn.Module) -> None:
    """The ignore_eos BPE case, 2 new tokens, 200 samples, oracle on: no false 'shifted', EOS 31998 masked.

    Slow (~2-3 min on 2 busy cores): the oracle costs ~10 passes over [tokens, 32 000] per
    scored token; the full cases run in benchmarks/bpe_world.py.
    """
    import dataclasses

    from speceq.engines.baseline import BaselineEngine
    from speceq.engines.reference import ReferenceSpeculativeEngine
    from speceq.pipeline.config import RunConfig
    from speceq.pipeline.runner import run

    (case,) = [c for c in bpe_cases() if c.case_id == "bpe-ignore-eos-t07-b4"]
    case = dataclasses.replace(case, params=dataclasses.replace(case.params, max_new_tokens=2))
    engines = {"baseline": BaselineEngine(bpe_target), "candidate": ReferenceSpeculativeEngine(bpe_target, BPE_DRAFT_DIR)}
    config = RunConfig(samples=200, chunk_size=200, out_dir=tmp_path / "out", progress=False)
    result = run(config, [case], engines=engines)
    assert result.oracle is not None and result.oracle["eos_token_id"] == BPE_EOS_ID
    (res,) = result.cases
    assert res.verdict != "shifted", res.summary()
    assert res.acceptance_rate is not None and 0 < res.acceptance_rate <= 1
    assert res.candidate_tokens == 2 * 200 * (1 + len(case.companions))  # ignore_eos: every row has 2 tokens


def test_eos_mass_of_the_world_prompts_is_what_the_docs_say(bpe_target: torch.nn.Module) -> None:
    """P(<eos>) as the first token (T = 1, exact, from the bundled target) after every world prompt
    matches ``eos_mass`` in bpe-metrics.json: >= 0.7 after the EOS-prone prompts (held-out file
    endings), < 1e-3 after the others (docs/explanation/bpe-world.md, "EOS-prone prompts"). A retrained target must
    update the metrics, the EOS cases and that section."""
    from speceq.models.bpe import BPE_EOS_PROMPTS, BPE_PROMPTS

    recorded = json.loads(BPE_METRICS_PATH.read_text(encoding="utf-8"))["eos_mass"]
    assert set(recorded) == {*BPE_PROMPTS, *BPE_EOS_PROMPTS}
    tok = load_bpe_tokenizer()
    with torch.inference_mode():
        for prompt in (*BPE_PROMPTS, *BPE_EOS_PROMPTS):
            logits = bpe_target(input_ids=torch.tensor([tok.encode(prompt).ids])).logits[0, -1]
            p_eos = float(torch.softmax(logits.double(), -1)[BPE_EOS_ID])
            assert p_eos == pytest.approx(recorded[prompt], rel=1e-3, abs=1e-12), prompt
            if prompt in BPE_EOS_PROMPTS:
                assert p_eos >= 0.7, prompt
            else:
                assert p_eos < 1e-3, prompt


@pytest.mark.parametrize("engine_name", ["baseline", "reference"])
def test_the_eos_prone_case_ends_rows_early_and_ignore_eos_does_not(bpe_target: torch.nn.Module,
                                                                   engine_name: str) -> None:
    """bpe-eos-b32's prompt (a held-out file ending) gets P(<eos>) ~0.78 as its first token: of 16
    seeded samples, rows of that prompt end at EOS 31998 before the case's 4 tokens; under
    bpe-ignore-eos-t07-b4 (P(<eos>) ~0.75 before masking) every row has all its tokens."""
    from speceq.engines.base import SampleRequest
    from speceq.engines.baseline import BaselineEngine
    from speceq.engines.reference import ReferenceSpeculativeEngine

    engine = (BaselineEngine(bpe_target) if engine_name == "baseline"
              else ReferenceSpeculativeEngine(bpe_target, BPE_DRAFT_DIR))
    cases = {c.case_id: c for c in bpe_cases()}
    for cid, ignore in (("bpe-eos-b32", False), ("bpe-ignore-eos-t07-b4", True)):
        case = cases[cid]
        assert case.params.ignore_eos is ignore
        batch = engine.sample(SampleRequest(prompts=tuple(tuple(p) for p in case.prompts), params=case.params,
                                            n=16, seed=7, batch_size=case.batch_size))
        main = np.asarray(batch.prompt_index) == 0
        lengths = np.asarray(batch.lengths)[main]
        ended = [batch.row_tokens(r)[-1] == BPE_EOS_ID for r in np.flatnonzero(main)]
        if ignore:
            assert (lengths == case.params.max_new_tokens).all() and not any(ended)
        else:
            short = lengths < case.params.max_new_tokens
            assert short.sum() >= 8, lengths  # P(<eos> first) ~0.78: ~12 of 16 expected
            assert all(e for e, s in zip(ended, short) if s)  # a short row ends at its EOS
