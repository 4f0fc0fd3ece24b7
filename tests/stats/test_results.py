"""Result objects: frozen, one-line summaries, JSON-able dicts; the synthetic scorer."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import speceq.stats as S
from speceq.stats.synthetic import random_target_probs, sample_categorical, scores_from_probs


def _all_results() -> list[object]:
    rng = np.random.default_rng(0)
    probs = random_target_probs(rng, 200, 8)
    draft = random_target_probs(rng, 200, 8)
    scores = scores_from_probs(probs, sample_categorical(probs, rng), draft_probs=draft)
    a, b = rng.multinomial(300, [0.5, 0.3, 0.2]), rng.multinomial(300, [0.5, 0.3, 0.2])
    return [
        S.chisquare_homogeneity(a, b),
        S.chisquare_gof(a, np.array([0.5, 0.3, 0.2])),
        S.ks_2samp_jittered(a, b, rng),
        S.cramervonmises_2samp_permutation(rng.random(20), rng.random(30), rng, 99),
        S.pit_uniformity(S.randomized_pit(scores, rng)),
        S.argmax_leak_z(scores),
        S.temperature_drift_z(scores),
        S.draft_drift_z(scores),
        S.support_violations(scores),
        S.chisquare_homogeneity(a, b).confidence_interval(0.9),
    ]


@pytest.mark.parametrize("result", _all_results(), ids=lambda r: type(r).__name__)
def test_result_contract(result: object) -> None:
    summary = result.summary()
    assert isinstance(summary, str) and summary and "\n" not in summary
    d = result.to_dict()
    assert json.loads(json.dumps(d)) == d  # plain Python types only
    first = dataclasses.fields(result)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(result, first, None)


def test_scores_from_probs_matches_a_loop() -> None:
    rng = np.random.default_rng(1)
    probs = random_target_probs(rng, 30, 6, top_k=4)
    probs[0] = [0.25, 0.25, 0.25, 0.25, 0.0, 0.0]  # ties: ranked by token id
    tokens = sample_categorical(probs, rng)
    tokens[0] = 2
    draft = random_target_probs(rng, 30, 6)
    s = scores_from_probs(probs, tokens, draft_probs=draft)
    for i, (p, x, q) in enumerate(zip(probs, tokens, draft)):
        order = sorted(range(6), key=lambda y: (-p[y], y))
        rank = order.index(x)
        assert s.cdf_before[i] == pytest.approx(sum(p[y] for y in order[:rank]))
        support = p > 0
        logp = np.log(p[support])
        assert s.logp_mean[i] == pytest.approx((p[support] * logp).sum())
        assert s.logp_var[i] == pytest.approx((p[support] * logp**2).sum() - (p[support] * logp).sum() ** 2, abs=1e-12)
        assert s.is_argmax[i] == (x == int(np.argmax(p))) and s.argmax_prob[i] == p.max()
        llr = np.log(q[support]) - logp
        assert s.draft_llr_mean[i] == pytest.approx((p[support] * llr).sum())
        assert s.draft_llr[i] == pytest.approx(np.log(q[x]) - np.log(p[x]))
    assert s.cdf_before[0] == pytest.approx(0.5)
