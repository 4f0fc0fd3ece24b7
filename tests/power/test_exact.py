"""Exact laws by enumeration: the reference engine's law is the target's, for every setting."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from speceq.core.params import SamplingParams
from speceq.engines.mutants import BonusFromDraft, ResampleFromTarget
from speceq.engines.reference import ReferenceSpeculativeEngine
from speceq.errors import ConfigError
from speceq.inputs.cases import Case
from speceq.models.hf_utils import tiny_random_llama
from speceq.power.exact import exact_laws

PROMPT = (5, 17, 99, 3)


@pytest.fixture(scope="module")
def models() -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.set_num_threads(1)
    return tiny_random_llama(0, init_std=0.5), tiny_random_llama(1, init_std=0.5, layers=1)


def case(**params) -> Case:
    return Case(case_id="c", prompt_ids=PROMPT, params=SamplingParams(**params))


@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("params", [
    dict(max_new_tokens=6),
    dict(max_new_tokens=2, temperature=0.7, top_k=20, top_p=0.9),
    dict(max_new_tokens=3, temperature=1.3, ignore_eos=True),
    dict(max_new_tokens=4, temperature=0.0),
], ids=["T1", "L2-topk-topp", "ignore-eos", "greedy"])
def test_reference_law_is_the_target_law(models, k, params) -> None:
    laws = exact_laws(ReferenceSpeculativeEngine(*models, k=k), case(**params))
    assert laws.positions == 2
    np.testing.assert_allclose(laws.engine.sum(axis=1), 1.0, atol=1e-9)
    np.testing.assert_allclose(laws.engine, laws.target, atol=1e-6)
    np.testing.assert_allclose(laws.joint_engine, laws.joint_target, atol=1e-6)
    assert max(laws.tv) < 1e-6 and 0.0 <= laws.accept_rate <= 1.0


def test_one_new_token_has_one_position(models) -> None:
    laws = exact_laws(ReferenceSpeculativeEngine(*models), case(max_new_tokens=1))
    assert laws.positions == 1 and laws.joint_engine is None and laws.accept_rate is None


def test_end_after_eos_carries_the_mass_of_eos(models) -> None:
    engine = ReferenceSpeculativeEngine(*models, eos_token_id=3)
    laws = exact_laws(engine, case(max_new_tokens=4))
    V = engine.vocab_size
    assert laws.engine[0, 3] > 0
    assert laws.engine[1, V] == pytest.approx(laws.engine[0, 3])
    assert laws.joint_engine[3, :V].sum() == 0.0


def test_a_residual_bug_shifts_both_positions_and_a_bonus_bug_only_the_second_at_k1(models) -> None:
    params = dict(max_new_tokens=5)
    resample = exact_laws(ResampleFromTarget(*models, k=2), case(**params))
    assert min(resample.tv) > 1e-3
    bonus = exact_laws(BonusFromDraft(*models, k=1), case(**params))
    assert bonus.tv[0] < 1e-6 and bonus.tv[1] > 1e-3
    deeper = exact_laws(BonusFromDraft(*models, k=2), case(**params))  # the bonus comes at position 2
    assert max(deeper.tv) < 1e-6


def test_bad_positions_and_prompts_are_config_errors(models) -> None:
    engine = ReferenceSpeculativeEngine(*models)
    with pytest.raises(ConfigError, match="positions"):
        exact_laws(engine, case(), positions=3)
    with pytest.raises(ConfigError, match="vocabulary"):
        exact_laws(engine, Case(case_id="c", prompt_ids=(1, 999)))


@pytest.mark.parametrize("keep_joint", [True, False], ids=["joint", "marginals-only"])
@pytest.mark.parametrize("params", [dict(max_new_tokens=4, temperature=0.7, top_k=20), dict(max_new_tokens=2)],
                         ids=["k2", "k1"])
def test_blocks_give_the_one_pass_laws(models, monkeypatch, keep_joint, params) -> None:
    """Large vocabularies enumerate in blocks (bounded memory): the laws of one pass, up to the float32
    rounding of logits from forward passes of other shapes (~1e-7 here)."""
    import speceq.power.exact as exact

    engine = ResampleFromTarget(*models, k=2, eos_token_id=3)
    whole = exact_laws(engine, case(**params))
    monkeypatch.setattr(exact, "EXACT_ONE_PASS_LOGITS", 0)
    monkeypatch.setattr(exact, "EXACT_LOGITS_BUDGET", 40 * engine.vocab_size)  # blocks of 40 first tokens
    if not keep_joint:
        monkeypatch.setattr(exact, "JOINT_MAX_ENTRIES", 0)
    assert len(exact._blocks(list(PROMPT), engine.vocab_size, fast=True)) == 7
    blocks = exact_laws(engine, case(**params))
    np.testing.assert_allclose(blocks.engine, whole.engine, rtol=0, atol=1e-6)
    np.testing.assert_allclose(blocks.target, whole.target, rtol=0, atol=1e-6)
    np.testing.assert_allclose(blocks.tv, whole.tv, rtol=0, atol=1e-6)
    assert blocks.accept_rate == pytest.approx(whole.accept_rate, abs=1e-6)
    np.testing.assert_allclose(blocks.engine.sum(axis=1), 1.0, atol=1e-9)
    if keep_joint:
        np.testing.assert_allclose(blocks.joint_engine, whole.joint_engine, rtol=0, atol=1e-6)
    else:
        assert blocks.joint_engine is None and blocks.joint_target is None
    assert max(whole.tv) > 1e-3  # a real shift is carried through the blocks
