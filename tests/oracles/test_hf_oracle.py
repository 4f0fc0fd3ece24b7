"""TargetOracle: teacher-forced TokenScores against a direct, unbatched computation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from speceq.core.params import SamplingParams
from speceq.engines.base import SampleBatch, batch_from_lists
from speceq.errors import ConfigError
from speceq.models.hf_utils import tiny_random_llama
from speceq.oracles.hf import TargetOracle
from speceq.stats.support_margin import exclusion_margins

PROMPTS = ((5, 17, 99, 3), (7,), (200, 31, 64))
ROWS = [[10, 11, 12], [13], [14, 15, 16, 17, 18], [19, 20], [21], [22, 23, 24]]
PARAMS = [
    SamplingParams(max_new_tokens=5),
    SamplingParams(temperature=0.7, top_k=20, top_p=0.9, max_new_tokens=5),
    SamplingParams(temperature=0.0, max_new_tokens=5),
    SamplingParams(temperature=1.2, max_new_tokens=5, ignore_eos=True),
]


@pytest.fixture(scope="module")
def models() -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.set_num_threads(1)
    return tiny_random_llama(0, init_std=0.5), tiny_random_llama(1, init_std=0.5, layers=1)


@pytest.fixture(scope="module")
def batch() -> SampleBatch:
    return batch_from_lists(ROWS, np.tile(np.arange(3), 2), max_new_tokens=5)


def direct_laws(model, prefix: list[int], params: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
    """(processed p, raw logits) of the next token after ``prefix``, one unpadded forward."""
    from speceq.core.processing import process_logits

    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([prefix])).logits[0, -1]
    return process_logits(logits, params, eos_token_id=257).double().numpy(), logits.double().numpy()


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: p.label())
def test_scores_match_direct_computation(models, batch, params) -> None:
    target, draft = models
    scores = TargetOracle(target, draft=draft).score(PROMPTS, batch, params, max_batch_rows=4)
    assert len(scores) == sum(map(len, ROWS)) and scores.has_draft
    i = outside = 0
    for r, row in enumerate(ROWS):
        prompt = list(PROMPTS[r % 3])
        for t, x in enumerate(row):
            p, raw = direct_laws(target, prompt + row[:t], params)
            q, _ = direct_laws(draft, prompt + row[:t], params)
            rank_before = (p > p[x]) | ((p == p[x]) & (np.arange(len(p)) < x))
            support = p > 0
            logp = np.log(p[support])
            raw_lp = np.sort(raw - np.logaddexp.reduce(raw))[::-1]
            llr_all = np.log(np.maximum(q[support], 1e-30)) - logp
            assert (scores.row[i], scores.position[i], scores.token[i]) == (r, t, x)
            np.testing.assert_allclose(
                [scores.prob[i], scores.cdf_before[i], scores.argmax_prob[i], scores.logp_mean[i], scores.logp_var[i]],
                [p[x], p[rank_before].sum(), p.max(), (p[support] * logp).sum(), (p[support] * logp**2).sum() - (p[support] * logp).sum() ** 2],
                atol=2e-5,
            )
            assert scores.is_argmax[i] == (x == int(np.argmax(p)))
            np.testing.assert_allclose(scores.raw_top2_margin[i], raw_lp[0] - raw_lp[1], atol=1e-4)
            if p[x] > 0:
                np.testing.assert_allclose(scores.logp[i], np.log(p[x]), rtol=1e-5)
                np.testing.assert_allclose(scores.draft_llr[i], np.log(max(q[x], 1e-30)) - np.log(p[x]), rtol=1e-4, atol=1e-4)
            else:
                assert scores.logp[i] == -np.inf
            np.testing.assert_allclose(scores.draft_llr_mean[i], (p[support] * llr_all).sum(), rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(scores.draft_tv[i], 0.5 * np.abs(p - q).sum(), atol=1e-5)
            if p[x] > 0 or params.greedy:
                assert scores.exclusion_margin[i] == 0.0
            else:  # the oracle's margin is the one of its raw logits (EOS masked under ignore_eos)
                masked = np.where(np.arange(len(raw)) == 257, -np.inf, raw) if params.ignore_eos else raw
                want = exclusion_margins(masked[None], np.array([x]), temperature=params.temperature,
                                         top_k=params.top_k, top_p=params.top_p)[0]
                np.testing.assert_allclose(scores.exclusion_margin[i], want, rtol=1e-4, atol=1e-5)
                outside += 1
            i += 1
    if params.top_k or params.top_p < 1:
        assert outside > 0  # the case has tokens outside the support to check


def test_zero_probability_token_scores_zero(models, batch) -> None:
    scores = TargetOracle(models[0]).score(PROMPTS, batch, SamplingParams(top_k=1, max_new_tokens=5))
    assert not scores.has_draft
    outside = ~scores.is_argmax
    assert outside.any() and (scores.prob[outside] == 0).all() and np.isneginf(scores.logp[outside]).all()


def test_batching_does_not_change_scores(models, batch) -> None:
    oracle = TargetOracle(models[0], draft=models[1])
    params = SamplingParams(temperature=0.8, top_p=0.95, max_new_tokens=5)
    one = oracle.score(PROMPTS, batch, params, max_batch_rows=1)
    many = oracle.score(PROMPTS, batch, params, max_batch_rows=256)
    for name in ("prob", "cdf_before", "logp_mean", "logp_var", "raw_top2_margin", "draft_llr"):
        np.testing.assert_allclose(getattr(one, name), getattr(many, name), atol=1e-5, err_msg=name)


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: p.label())
def test_field_slices_give_identical_fields(models, batch, params, monkeypatch) -> None:
    """The per-token fields are reduced in row slices (bounded memory): one row per slice
    gives bit-identical numbers to every token of a forward pass at once."""
    import speceq.oracles.hf as oracle_module

    oracle = TargetOracle(models[0], draft=models[1])
    whole = oracle.score(PROMPTS, batch, params)
    margins = oracle.raw_top2_margin(PROMPTS)
    monkeypatch.setattr(oracle_module, "FIELDS_BUDGET", 1)  # FIELDS_BUDGET // V = 0 -> one row per slice
    assert list(oracle_module._row_slices(3, oracle.vocab_size)) == [(0, 1), (1, 2), (2, 3)]
    sliced = oracle.score(PROMPTS, batch, params)
    for name in ("prob", "cdf_before", "argmax_prob", "is_argmax", "logp", "logp_mean", "logp_var",
                 "raw_top2_margin", "draft_llr", "draft_llr_mean", "draft_llr_var", "draft_tv"):
        np.testing.assert_array_equal(getattr(sliced, name), getattr(whole, name), err_msg=name)
    np.testing.assert_array_equal(oracle.raw_top2_margin(PROMPTS), margins)


def test_next_token_probs_and_margin(models) -> None:
    oracle = TargetOracle(models[0])
    prefixes = [[1, 2, 3], [4], [5, 6, 7, 8, 9]]
    params = SamplingParams(temperature=0.5, top_k=10)
    probs = oracle.next_token_probs(prefixes, params)
    margins = oracle.raw_top2_margin(prefixes)
    assert probs.shape == (3, 259) and margins.shape == (3,)
    for i, prefix in enumerate(prefixes):
        p, raw = direct_laws(models[0], prefix, params)
        np.testing.assert_allclose(probs[i], p, atol=1e-6)
        lp = np.sort(raw - np.logaddexp.reduce(raw))[::-1]
        np.testing.assert_allclose(margins[i], lp[0] - lp[1], atol=1e-5)
        assert (probs[i] > 0).sum() == 10


def test_bad_inputs_are_config_errors(models, batch) -> None:
    oracle = TargetOracle(models[0])
    with pytest.raises(ConfigError, match="prefix 1"):
        oracle.next_token_probs([[1], []], SamplingParams())
    with pytest.raises(ConfigError, match="prompt 0"):
        oracle.score([(1, 300), (2,), (3,)], batch, SamplingParams(max_new_tokens=5))
    with pytest.raises(ConfigError, match="prompt_index 2 is outside the 2 prompts"):
        oracle.score(PROMPTS[:2], batch, SamplingParams(max_new_tokens=5))


def test_empty_batch_gives_empty_scores(models) -> None:
    empty = batch_from_lists([], np.zeros(0, dtype=np.int64), max_new_tokens=3)
    scores = TargetOracle(models[0], draft=models[1]).score(PROMPTS, empty, SamplingParams(max_new_tokens=3))
    assert len(scores) == 0 and scores.has_draft
