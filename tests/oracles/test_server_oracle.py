"""ServerOracle against a fake vLLM-shaped server serving the bundled target's exact log-probabilities.

Where the server's numbers determine the processed law, every field must equal TargetOracle's
(to float32 rounding); with only the top-K of a plain law, the exact fields must still agree
and the coarsened PIT must be uniform under H0 (and reject a shifted sampler); what cannot be
reproduced exactly is refused.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from fake_logprob_server import serve_logprobs

from speceq import stats
from speceq.core.params import SamplingParams
from speceq.core.processing import process_logits
from speceq.engines.base import SampleRequest
from speceq.engines.baseline import BaselineEngine
from speceq.errors import ConfigError
from speceq.models import EOS_ID, VOCAB_SIZE, ByteTokenizer
from speceq.oracles.hf import TargetOracle
from speceq.oracles.server import ServerOracle
from speceq.oracles.server_laws import RawTop, dense_logits

PROMPTS = tuple(tuple(ByteTokenizer().encode(t)) for t in ("def add(", "import ", "for i in "))
FIELDS = ("prob", "cdf_before", "argmax_prob", "logp", "logp_mean", "logp_var", "raw_top2_margin")
LOG_FIELDS = ("logp", "logp_mean", "logp_var", "raw_top2_margin")


@pytest.fixture(scope="module")
def engine() -> BaselineEngine:
    torch.set_num_threads(1)
    return BaselineEngine()


@pytest.fixture(scope="module")
def target(engine) -> TargetOracle:
    return TargetOracle(engine.model, eos_token_id=engine.eos_token_id)


@pytest.fixture(scope="module")
def server(engine):
    with serve_logprobs(engine.model, max_logprobs=-1) as s:
        yield s


def sample(engine: BaselineEngine, params: SamplingParams, n: int, seed: int = 1):
    return engine.sample(SampleRequest(prompts=PROMPTS, params=params, n=n, seed=seed, batch_size=64))


def oracle(server, top: int | None) -> ServerOracle:
    return ServerOracle(server.url, vocab_size=VOCAB_SIZE, eos_token_id=EOS_ID, top_logprobs=top, rows_per_request=64)


def assert_same(got, want, fields=FIELDS) -> None:
    assert len(got) == len(want) > 0
    np.testing.assert_array_equal(got.token, want.token)
    np.testing.assert_array_equal(got.row, want.row)
    np.testing.assert_array_equal(got.position, want.position)
    np.testing.assert_array_equal(got.is_argmax, want.is_argmax)
    for name in fields:
        # the server sends float32 log-probabilities (as vLLM does): probabilities agree to 1e-6; log
        # quantities carry the float32 rounding of values of magnitude up to ~16 nats (ulp 1e-6, a few ulps)
        atol = 1e-5 if name in LOG_FIELDS else 1e-6
        np.testing.assert_allclose(getattr(got, name), getattr(want, name), rtol=1e-5, atol=atol, err_msg=name)


EXACT_WITH_ALL = [
    SamplingParams(max_new_tokens=6),
    SamplingParams(temperature=0.7, max_new_tokens=6),
    SamplingParams(temperature=1.3, top_p=0.9, max_new_tokens=6),
    SamplingParams(temperature=0.8, top_k=7, top_p=0.95, max_new_tokens=6, ignore_eos=True),
    SamplingParams(temperature=0.0, max_new_tokens=6),
]


@pytest.mark.parametrize("params", EXACT_WITH_ALL, ids=lambda p: p.label())
def test_whole_vocabulary_equals_target_oracle(engine, target, server, params) -> None:
    batch = sample(engine, params, 8)
    server_oracle = oracle(server, None)
    assert server_oracle.knows_full_law(params)
    assert_same(server_oracle.score(PROMPTS, batch, params), target.score(PROMPTS, batch, params))
    np.testing.assert_allclose(server_oracle.next_token_probs(PROMPTS, params),
                               target.next_token_probs(PROMPTS, params), atol=1e-6)
    np.testing.assert_allclose(server_oracle.raw_top2_margin(PROMPTS), target.raw_top2_margin(PROMPTS), atol=1e-5)


EXACT_WITH_TOP20 = [
    SamplingParams(temperature=0.7, top_k=5, max_new_tokens=6),
    SamplingParams(top_k=18, max_new_tokens=6, ignore_eos=True),
    SamplingParams(top_p=0.3, max_new_tokens=6),
    SamplingParams(temperature=0.0, max_new_tokens=6, ignore_eos=True),
]


@pytest.mark.parametrize("params", EXACT_WITH_TOP20, ids=lambda p: p.label())
def test_top_k_that_processing_keeps_is_exact(engine, target, server, params) -> None:
    batch = sample(engine, params, 10)
    server_oracle = oracle(server, 20)
    assert server_oracle.knows_full_law(params)
    assert_same(server_oracle.score(PROMPTS, batch, params), target.score(PROMPTS, batch, params))


def test_top_k_of_a_plain_law_is_coarsened(engine, target, server) -> None:
    params = SamplingParams(max_new_tokens=6)
    batch = sample(engine, params, 20)
    server_oracle = oracle(server, 3)
    assert not server_oracle.knows_full_law(params)
    got, want = server_oracle.score(PROMPTS, batch, params), target.score(PROMPTS, batch, params)
    assert_same(got, want, fields=("prob", "argmax_prob", "logp", "raw_top2_margin"))
    assert got.logp_mean is None and got.logp_var is None and got.pit_mass is not None and not got.has_full_law
    # the true rank of each token under the target's law, from the transformers oracle
    prefixes = [list(PROMPTS[int(batch.prompt_index[r])]) + batch.row_tokens(int(r))[:t]
                for r, t in zip(want.row, want.position, strict=True)]
    laws = target.next_token_probs(prefixes, params).astype(np.float64)
    ids = np.arange(laws.shape[1])[None, :]
    px = laws[np.arange(len(want)), want.token][:, None]
    rank = ((laws > px) | ((laws == px) & (ids < want.token[:, None]))).sum(axis=1)
    in_top, tail = rank < 3, rank >= 3
    assert in_top.sum() > 20 and tail.sum() > 20  # both kinds occur in this sample
    # inside the top-3: the exact cell; outside: the tail cell [top-3 mass, 1]
    np.testing.assert_allclose(got.cdf_before[in_top], want.cdf_before[in_top], atol=1e-6)
    np.testing.assert_allclose(got.pit_mass[in_top], want.prob[in_top], rtol=1e-5)
    top3_mass = np.sort(laws, axis=1)[:, ::-1][:, :3].sum(axis=1)
    np.testing.assert_allclose(got.cdf_before[tail], top3_mass[tail], atol=1e-6)
    np.testing.assert_allclose(got.pit_mass[tail], 1.0 - top3_mass[tail], atol=1e-6)
    with pytest.raises(ConfigError, match="whole law is unknown"):
        server_oracle.next_token_probs(PROMPTS, params)


def test_coarsened_pit_uniform_under_h0_and_rejects_a_shift(engine, server) -> None:
    """Seeded: ~1400 tokens at T=1 scored with the top-3 only. H0 (plain T=1 samples): the AD test
    does not reject at 1e-3; T=0.8 samples scored as T=1 (a temperature bug): it rejects at 1e-6."""
    params = SamplingParams(max_new_tokens=8)
    server_oracle = oracle(server, 3)
    h0 = server_oracle.score(PROMPTS, sample(engine, params, 60, seed=7), params)
    p_h0 = stats.pit_uniformity(stats.randomized_pit(h0, np.random.default_rng(0))).anderson_darling.pvalue
    shifted = sample(engine, SamplingParams(temperature=0.8, max_new_tokens=8), 60, seed=8)
    h1 = server_oracle.score(PROMPTS, shifted, params)
    p_h1 = stats.pit_uniformity(stats.randomized_pit(h1, np.random.default_rng(0))).anderson_darling.pvalue
    assert len(h0) > 1200 and float(np.mean(h0.pit_mass != h0.prob)) > 0.05  # the tail cell is used
    assert p_h0 > 1e-3, p_h0
    assert p_h1 < 1e-6, p_h1


@pytest.mark.parametrize(("params", "top", "match"), [
    (SamplingParams(temperature=0.7, max_new_tokens=4), 20, "temperature=0.7 without top_k"),
    (SamplingParams(top_k=30, max_new_tokens=4), 20, "top_k=30 needs the top 31"),
    (SamplingParams(top_k=20, max_new_tokens=4), 20, "top_k=20 needs the top 21"),
    (SamplingParams(top_k=19, max_new_tokens=4, ignore_eos=True), 20, "top_k=19 with ignore_eos needs the top 21"),
])
def test_refuses_what_top_k_cannot_give(server, params, top, match) -> None:
    with pytest.raises(ConfigError, match=match):
        oracle(server, top).knows_full_law(params)


def test_refuses_uncovered_nucleus_and_unknown_eos_mass(engine, server) -> None:
    params = SamplingParams(top_p=0.999, max_new_tokens=4)
    batch = sample(engine, params, 5)
    with pytest.raises(ConfigError, match=r"top_p=0.999: the top 2 raw log-probabilities hold mass"):
        oracle(server, 2).score(PROMPTS, batch, params)
    params = SamplingParams(max_new_tokens=4, ignore_eos=True)
    batch = sample(engine, params, 5)
    with pytest.raises(ConfigError, match=r"ignore_eos at temperature 1 without top_k: the EOS \(257\)"):
        oracle(server, 2).score(PROMPTS, batch, params)


def _top(logp: list[float]) -> RawTop:
    """A position's top list (ids 0..K-1, descending raw log-probabilities)."""
    return RawTop(ids=np.arange(len(logp)), logp=np.asarray(logp, dtype=np.float64), token=0, token_logp=logp[0])


def test_refuses_a_position_whose_ties_the_top_k_does_not_determine() -> None:
    """Top-k keeps every token tied with the k-th and top-p keeps tied tokens in the server's sort order: a position
    where the top-K cannot tell which tokens stay is refused, one where it can is exact."""
    V = 50
    tied_kth = _top([-0.5, -1.0, -2.0, -2.0])  # top_k=3: the 3rd ties with the last known, more may follow
    with pytest.raises(ConfigError, match=r"top_k=3: the k-th largest raw log-probability here ties with the last"):
        dense_logits([tied_kth], SamplingParams(top_k=3), V, None, ["row 0 position 0"])
    ok = dense_logits([_top([-0.5, -1.0, -2.0, -2.0, -3.0])], SamplingParams(top_k=3), V, None, ["p"])
    assert int((process_logits(ok, SamplingParams(top_k=3)) > 0).sum()) == 4  # both tied tokens kept
    straddle = _top([0.0, -1.0, -1.0, -1.0, -5.0])  # within top_k=4 the cut of top_p=0.6 falls inside the tie
    with pytest.raises(ConfigError, match=r"top_p=0.6: equal probabilities straddle the nucleus cut"):
        dense_logits([straddle], SamplingParams(top_k=4, top_p=0.6), V, None, ["row 1 position 2"])
    dense_logits([straddle], SamplingParams(top_k=4, top_p=0.3), V, None, ["p"])  # the cut after the first: exact
    nucleus = _top(list(np.log([0.3, 0.2, 0.2, 0.2, 0.05])))  # top_p alone at T = 1: the cut inside the 0.2s
    with pytest.raises(ConfigError, match=r"top_p=0.6: equal probabilities straddle the nucleus cut here, or"):
        dense_logits([nucleus], SamplingParams(top_p=0.6), V, None, ["row 2 position 0"])
    law = dense_logits([nucleus], SamplingParams(top_p=0.25), V, None, ["p"])
    assert torch.isfinite(law[0]).sum() == 1


def test_server_limit_is_a_config_error(engine) -> None:
    with serve_logprobs(engine.model, max_logprobs=20) as small:
        server_oracle = oracle(small, None)
        with pytest.raises(ConfigError, match="--max-logprobs -1"):
            server_oracle.raw_top2_margin(PROMPTS)


def test_identical_rows_are_fetched_once(engine, server) -> None:
    params = SamplingParams(temperature=0.0, max_new_tokens=4)
    batch = sample(engine, params, 16)
    server_oracle = ServerOracle(server.url, vocab_size=VOCAB_SIZE, eos_token_id=EOS_ID, rows_per_request=1,
                                 max_concurrency=1)
    before = server.requests
    server_oracle.score(PROMPTS, batch, params)
    assert server.requests - before == 4 * len(PROMPTS)  # greedy: one prefix per prompt and position
    server_oracle = ServerOracle(server.url, vocab_size=VOCAB_SIZE, eos_token_id=EOS_ID, rows_per_request=1,
                                 max_concurrency=1, top_logprobs=20)
    before = server.requests
    server_oracle.score(PROMPTS, batch, params)
    assert server.requests - before == len(PROMPTS)  # top-K: one prompt_logprobs request per distinct row
