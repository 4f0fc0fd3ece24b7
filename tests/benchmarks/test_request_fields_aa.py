"""The request-fields A/A benchmark draws and scores the processed law exactly, and its controls are detected."""

from __future__ import annotations

import numpy as np
import pytest
from benchmark_scripts import load_script

from speceq.core.params import SamplingParams
from speceq.stats.goodness import chisquare_gof

V, EOS = 12, 0
PROMPT = (5, 3, 7)
#: Penalties, temperature and min_p together: every history-dependent step and a truncation.
PARAMS = SamplingParams(max_new_tokens=3, temperature=0.9, min_p=0.05, repetition_penalty=1.5,
                        frequency_penalty=0.8, presence_penalty=0.6)


def _script():  # noqa: ANN202
    return load_script("request_fields_aa")


def _model(aa):  # noqa: ANN001, ANN202
    rng = np.random.default_rng(11)
    return aa.ProcessedMarkov(rng.dirichlet(np.full(V, 0.8)), rng.dirichlet(np.full(V, 0.6), size=V), EOS)


def _by_hand(raw: np.ndarray, prompt: tuple[int, ...], generated: list[int]) -> np.ndarray:
    """PARAMS' processed law written out in numpy (vLLM order), independently of speceq.core.processing."""
    x = np.log(raw)
    seen = np.zeros(V, dtype=bool)
    seen[list(prompt) + generated] = True
    x = np.where(seen, np.where(x > 0, x / 1.5, x * 1.5), x)
    counts = np.bincount(np.asarray(generated, dtype=np.int64), minlength=V)
    x = x - 0.8 * counts - 0.6 * (counts > 0)
    p = np.exp((x - x.max()) / 0.9)
    p /= p.sum()
    p = np.where(p < 0.05 * p.max(), 0.0, p)
    return p / p.sum()


def test_engine_draws_and_oracle_scores_follow_the_processed_law_given_each_rows_history() -> None:
    aa = _script()
    model = _model(aa)
    batch = model.sample(PROMPT, PARAMS, 20_000, np.random.default_rng(0))
    first = batch.tokens[:, 0]
    law0 = _by_hand(model.initial, PROMPT, [])
    assert chisquare_gof(np.bincount(first, minlength=V), law0).pvalue > 1e-3
    # the test can fail: the law without the prompt's repetition penalty is far off these draws
    assert chisquare_gof(np.bincount(first, minlength=V), _by_hand(model.initial, (), [])).pvalue < 1e-3
    a = int(np.bincount(first[first != EOS], minlength=V).argmax())  # the second token after a frequent first one
    rows = np.flatnonzero((first == a) & (batch.lengths >= 2))
    law1 = _by_hand(model.transition[a], PROMPT, [a])
    assert law1[a] < _by_hand(model.transition[a], PROMPT, [])[a]  # the history penalises a here
    assert chisquare_gof(np.bincount(batch.tokens[rows, 1], minlength=V), law1).pvalue > 1e-3
    # the oracle scores each token with that same law: its probability under the row's own history
    scores = aa.ProcessedMarkovOracle(model).score([PROMPT], batch, PARAMS)
    at = (scores.position == 1) & np.isin(scores.row, rows)
    np.testing.assert_allclose(scores.prob[at], law1[batch.tokens[scores.row[at], 1]], rtol=1e-5)
    np.testing.assert_allclose(aa.ProcessedMarkovOracle(model).next_token_probs([PROMPT], PARAMS)[0], law0, atol=1e-6)
    wrong = aa.ProcessedMarkovOracle(model, "history").score([PROMPT], batch, PARAMS)
    assert not np.allclose(wrong.prob[at], scores.prob[at])


@pytest.mark.parametrize("wrong", ["history", "bias"])
def test_a_candidate_with_the_wrong_law_is_shifted_and_the_aa_is_not(wrong: str) -> None:
    aa = _script()
    model = _model(aa)
    cases = aa.field_cases(model.initial, prompt_head=6)
    assert [c.case_id for c in cases] == ["penalties-vllm", "min-p", "logit-bias", "hf-order"]
    shifted, why, _ = aa.aa_runs(model, 2, 400, seed=3, wrong=wrong, cases=cases)
    assert shifted == 2, why
    expected = "logit-bias" if wrong == "bias" else ("penalties-vllm", "hf-order")
    assert all(k.startswith(expected) for k in why), why
    if wrong == "history":  # one A/A pair of runs (seeded): exact engines and oracle, nothing shifted
        shifted, why, results = aa.aa_runs(model, 2, 400, seed=3, cases=cases)
        assert shifted == 0, why
        assert all(r.verdict != "shifted" for r in results)


def test_a_wrong_oracle_shared_by_equal_engines_shows_in_the_one_sample_pit_not_as_a_shift() -> None:
    """The oracle dropping logit_bias: the primary tests compare the engines, the one-sample PIT sees the oracle."""
    aa = _script()
    model = _model(aa)
    cases = aa.field_cases(model.initial, prompt_head=6)
    shifted, why, results = aa.aa_runs(model, 1, 400, seed=4, wrong="bias", wrong_side="oracle", cases=cases)
    assert shifted == 0, why
    assert aa.one_sample_alarm(results[0])
    _, _, exact = aa.aa_runs(model, 1, 400, seed=4, cases=cases)
    assert not aa.one_sample_alarm(exact[0])
