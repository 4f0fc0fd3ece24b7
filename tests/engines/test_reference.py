"""ReferenceSpeculativeEngine: the accept/reject arithmetic, its exact single-step law,
agreement with the oracle at batch > 1 with ragged acceptance, and a seeded empirical check.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from speceq.core.params import SamplingParams
from speceq.engines._kv import SlotCache
from speceq.engines.base import SampleRequest, validate_batch
from speceq.engines.baseline import BaselineEngine
from speceq.engines.reference import ReferenceSpeculativeEngine
from speceq.engines.rejection import accept_prefix_lengths, acceptance_ratios, residual_probs
from speceq.errors import ConfigError
from speceq.oracles.hf import TargetOracle

PARAMS = [
    SamplingParams(max_new_tokens=7),
    SamplingParams(temperature=0.7, top_k=20, top_p=0.9, max_new_tokens=7),
    SamplingParams(temperature=1.3, top_p=0.8, max_new_tokens=7, ignore_eos=True),
    SamplingParams(temperature=0.0, max_new_tokens=7),
]


class ResampleFromTarget(ReferenceSpeculativeEngine):
    """The classic bug: after a rejection, draw from p instead of norm(max(0, p - q))."""

    def residual(self, target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
        return target_probs


class NoRollback(ReferenceSpeculativeEngine):
    """Rejected draft tokens stay visible in the KV caches."""

    def rollback(self, slots: SlotCache, keep: torch.Tensor) -> None:
        return None


class PositionsIgnoreLeftPadding(ReferenceSpeculativeEngine):
    """Position ids counted from the first column of the batch, padding included."""

    def position_ids(self, slots: SlotCache, valid: torch.Tensor) -> torch.Tensor:
        return slots.positions_for(valid) + slots.left_pad[:, None]


class BonusHookOverridden(ReferenceSpeculativeEngine):
    """Correct law, but overriding bonus_probs makes the loop feed d_k to the draft for its q."""

    seen_draft_probs: list[tuple[int, ...]]

    def bonus_probs(self, target_probs: torch.Tensor, draft_probs: torch.Tensor | None) -> torch.Tensor:
        assert draft_probs is not None and draft_probs.shape == target_probs.shape
        self.seen_draft_probs.append(tuple(draft_probs.shape))
        return target_probs


# ---- the accept/reject functions -----------------------------------------------------------
def test_accept_prefix_lengths_stops_at_the_first_rejection() -> None:
    accept = torch.tensor([[1.0, 0.5, 1.0], [0.2, 1.0, 1.0], [1.0, 1.0, 1.0], [1.0, 0.5, 0.0]])
    u = torch.tensor([[0.3, 0.6, 0.1], [0.3, 0.0, 0.0], [0.99, 0.0, 0.5], [0.0, 0.4, 0.0]])
    assert accept_prefix_lengths(accept, u).tolist() == [1, 0, 3, 2]


def test_acceptance_ratios_are_min_one_p_over_q() -> None:
    ratios = acceptance_ratios(torch.tensor([[0.2, 0.5, 0.0]]), torch.tensor([[0.4, 0.25, 0.1]]))
    torch.testing.assert_close(ratios, torch.tensor([[0.5, 1.0, 0.0]]))


def test_residual_is_the_normalised_positive_part() -> None:
    p = torch.tensor([[0.5, 0.3, 0.2, 0.0]])
    q = torch.tensor([[0.2, 0.5, 0.1, 0.2]])
    torch.testing.assert_close(residual_probs(p, q), torch.tensor([[0.75, 0.0, 0.25, 0.0]]))


def test_residual_without_mass_falls_back_to_p() -> None:
    p = torch.tensor([[0.5, 0.5]])
    torch.testing.assert_close(residual_probs(p, p.clone()), p)


def first_position_laws(target, draft, prompt, params) -> tuple[torch.Tensor, torch.Tensor]:
    p = TargetOracle(target).next_token_probs([prompt], params)[0]
    q = TargetOracle(draft).next_token_probs([prompt], params)[0]
    return torch.from_numpy(p), torch.from_numpy(q)


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: p.label())
def test_single_step_law_is_exactly_p(target, far_draft, close_draft, params) -> None:
    engine = ReferenceSpeculativeEngine(target, far_draft)
    for draft in (far_draft, close_draft):
        p, q = first_position_laws(target, draft, [5, 17, 99], params)
        law = engine.single_step_law(p, q)
        torch.testing.assert_close(law, p.double(), atol=1e-7, rtol=0)


def test_single_step_law_detects_resampling_from_p(target, far_draft) -> None:
    p, q = first_position_laws(target, far_draft, [5, 17, 99], SamplingParams())
    law = ResampleFromTarget(target, far_draft).single_step_law(p, q)
    tv = 0.5 * float((law - p.double()).abs().sum())
    assert tv > 0.05


# ---- the engine ----------------------------------------------------------------------------
def traced_vs_oracle(engine, request, eos_id) -> tuple[np.ndarray, np.ndarray]:
    batch = engine.sample(request)
    validate_batch(batch, request, engine)
    prefixes = []
    for r in range(batch.rows):
        prompt = list(request.prompts[int(batch.prompt_index[r])])
        row = batch.row_tokens(r)
        prefixes += [prompt + row[:t] for t in range(len(row))]
    expected = TargetOracle(engine.model).next_token_probs(prefixes, request.params, eos_token_id=eos_id)
    mask = np.arange(batch.tokens.shape[1])[None, :] < batch.lengths[:, None]
    return batch.info["trace_probs"][mask], expected


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: p.label())
def test_target_laws_at_emitted_positions_equal_oracle_at_batch_4(
    target, close_draft, eos_id, mixed_prompts, params
) -> None:
    engine = ReferenceSpeculativeEngine(target, close_draft, k=3, eos_token_id=eos_id, trace=True)
    request = SampleRequest(prompts=mixed_prompts, params=params, n=4, seed=3, batch_size=4)
    got, expected = traced_vs_oracle(engine, request, eos_id)
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("broken", [NoRollback, PositionsIgnoreLeftPadding])
def test_cache_and_position_bugs_break_the_oracle_agreement(target, close_draft, eos_id, mixed_prompts, broken) -> None:
    engine = broken(target, close_draft, k=3, eos_token_id=eos_id, trace=True)
    request = SampleRequest(prompts=mixed_prompts, params=PARAMS[0], n=4, seed=3, batch_size=4)
    got, expected = traced_vs_oracle(engine, request, eos_id)
    assert np.abs(got - expected).max() > 1e-2


def test_bonus_hook_gets_the_draft_law_and_the_caches_stay_exact(target, close_draft, eos_id, mixed_prompts) -> None:
    engine = BonusHookOverridden(target, close_draft, k=3, eos_token_id=eos_id, trace=True)
    engine.seen_draft_probs = []
    assert engine.needs_bonus_draft_probs and not ReferenceSpeculativeEngine(target, close_draft).needs_bonus_draft_probs
    request = SampleRequest(prompts=mixed_prompts, params=PARAMS[1], n=4, seed=8, batch_size=4)
    got, expected = traced_vs_oracle(engine, request, eos_id)
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
    assert engine.seen_draft_probs


def test_greedy_equals_baseline_greedy_at_batch_1_and_4(target, close_draft, mixed_prompts) -> None:
    params = SamplingParams(temperature=0.0, max_new_tokens=12, ignore_eos=True)
    base = BaselineEngine(target).sample(SampleRequest(prompts=mixed_prompts, params=params, n=1, seed=0))
    engine = ReferenceSpeculativeEngine(target, close_draft, k=4)
    for batch_size in (1, 3):
        spec = engine.sample(SampleRequest(prompts=mixed_prompts, params=params, n=1, seed=0, batch_size=batch_size))
        np.testing.assert_array_equal(spec.tokens, base.tokens)
        assert 0 < spec.accepted_tokens <= spec.drafted_tokens


def test_same_seed_same_rows_other_seed_other_rows(target, close_draft, mixed_prompts) -> None:
    engine = ReferenceSpeculativeEngine(target, close_draft, k=3)
    request = SampleRequest(prompts=mixed_prompts, params=SamplingParams(max_new_tokens=8), n=3, seed=5, batch_size=4)
    a, b = engine.sample(request), engine.sample(request)
    c = engine.sample(SampleRequest(prompts=mixed_prompts, params=request.params, n=3, seed=6, batch_size=4))
    np.testing.assert_array_equal(a.tokens, b.tokens)
    assert (a.accepted_tokens, a.drafted_tokens) == (b.accepted_tokens, b.drafted_tokens)
    assert not np.array_equal(a.tokens, c.tokens)


@pytest.mark.parametrize("ignore_eos", [False, True])
def test_batches_are_valid_and_counts_recorded(target, close_draft, eos_id, mixed_prompts, ignore_eos) -> None:
    engine = ReferenceSpeculativeEngine(target, close_draft, k=3, eos_token_id=eos_id)
    params = SamplingParams(max_new_tokens=12, ignore_eos=ignore_eos)
    request = SampleRequest(prompts=mixed_prompts, params=params, n=8, seed=2, batch_size=5)
    batch = engine.sample(request)
    validate_batch(batch, request, engine)
    if ignore_eos:
        assert (batch.lengths == 12).all()
    else:
        assert (batch.lengths < 12).any(), "no row ended at EOS: the fixture's EOS is too rare to test this"
    assert 0 < batch.accepted_tokens < batch.drafted_tokens
    assert batch.verify_steps >= batch.rows
    assert 0.1 < batch.acceptance_rate < 0.9


def test_draft_equal_to_target_accepts_everything(target, mixed_prompts) -> None:
    engine = ReferenceSpeculativeEngine(target, target, k=4)
    params = SamplingParams(max_new_tokens=10, ignore_eos=True)
    batch = engine.sample(SampleRequest(prompts=mixed_prompts, params=params, n=2, seed=0, batch_size=6))
    assert batch.acceptance_rate > 0.99


def test_invalid_k_is_a_config_error(target, close_draft) -> None:
    with pytest.raises(ConfigError, match="k"):
        ReferenceSpeculativeEngine(target, close_draft, k=0)


# ---- seeded empirical check of the first token ---------------------------------------------
#: Prompts of lengths 1, 7, 3 and 2 sharing each batch of 4.
EMPIRICAL_PROMPTS = ((7,), (5, 17, 99, 3, 42, 8, 120), (200, 31, 64), (9, 9))


def first_token_pvalue(engine, prompts, n: int, batch_size: int, seed: int) -> float:
    """Pearson chi-square of the first tokens against the oracle's p, summed over prompts.

    Bins come from p only (tokens with n p >= 5, the rest merged); max_new_tokens=2 so
    that the first token goes through a draft, the accept test and the residual.
    """
    params = SamplingParams(max_new_tokens=2)
    batch = engine.sample(SampleRequest(prompts=prompts, params=params, n=n, seed=seed, batch_size=batch_size))
    laws = TargetOracle(engine.model).next_token_probs(list(prompts), params).astype(np.float64)
    statistic, dof = 0.0, 0
    for i, p in enumerate(laws):
        first = batch.tokens[batch.prompt_index == i, 0]
        big = n * p >= 5
        observed = np.append(np.bincount(first, minlength=len(p))[big], (~big[first]).sum())
        expected = np.append(n * p[big], n * p[~big].sum())
        statistic += float(((observed - expected) ** 2 / expected).sum())
        dof += len(observed) - 1
    return float(stats.chi2.sf(statistic, dof))


@pytest.mark.parametrize("batch_size,prompts,n", [(1, EMPIRICAL_PROMPTS[:1], 1000), (4, EMPIRICAL_PROMPTS, 400)])
def test_first_token_frequencies_match_oracle(fast_target, fast_draft, batch_size, prompts, n) -> None:
    engine = ReferenceSpeculativeEngine(fast_target, fast_draft, k=1)
    assert first_token_pvalue(engine, prompts, n, batch_size, seed=123) > 1e-3


@pytest.mark.parametrize("batch_size,prompts,n", [(1, EMPIRICAL_PROMPTS[:1], 300), (4, EMPIRICAL_PROMPTS, 100)])
def test_first_token_check_rejects_the_residual_bug(fast_target, fast_draft, batch_size, prompts, n) -> None:
    engine = ResampleFromTarget(fast_target, fast_draft, k=1)
    assert first_token_pvalue(engine, prompts, n, batch_size, seed=123) < 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("batch_size", [1, 4])
def test_first_token_frequencies_match_oracle_large(fast_target, fast_draft, batch_size) -> None:
    prompts = EMPIRICAL_PROMPTS[:1] if batch_size == 1 else EMPIRICAL_PROMPTS
    engine = ReferenceSpeculativeEngine(fast_target, fast_draft, k=1)
    assert first_token_pvalue(engine, prompts, 20000 // len(prompts), batch_size, seed=7) > 1e-3
