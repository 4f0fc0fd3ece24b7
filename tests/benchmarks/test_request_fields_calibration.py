"""Seeded subset of benchmarks/request_fields_calibration.py: sizes on the request-field and grammar oracle paths.

The laws are those the primary tests see (checked against rows drawn through the processed law),
the chi-square size checks are binomial tails as in tests/stats/test_tail_calibration.py (count of
p <= 1e-3 within the (1 - 1e-6) quantile of Binomial(R, 1.5e-3); R catches a 3x-liberal test w.p.
>= 0.99; a p-value 3x too small fails), the comparisons' Rao-Blackwellised sizes must stay at the
level on exact draws (the table flags a size 3x its level), and the real comparisons must reject a
candidate that drops logit_bias.
"""

from __future__ import annotations

import numpy as np
import pytest
from benchmark_scripts import load_script
from binomial_tail import rejection_limit, reps_to_catch
from scipy.stats import binomtest

from speceq.core.params import SamplingParams
from speceq.models import EOS_ID, ByteTokenizer
from speceq.models.grammar import grammar_violation
from speceq.stats.goodness import chisquare_gof

LEVEL = 1e-3
FACTOR = 1.5
REPS = reps_to_catch(LEVEL, 3.0, FACTOR)
V = 259


def _raw(seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """A random first-order model over the byte vocabulary (Dirichlet(0.3) laws)."""
    r = np.random.default_rng(seed)
    init, trans = r.dirichlet(np.full(V, 0.3)), r.dirichlet(np.full(V, 0.3), size=V)
    trans[:, EOS_ID] += 0.1
    return init, trans / trans.sum(axis=1, keepdims=True)


HEADS = [int(x) for x in np.argsort(-_raw()[0])[:4]]
#: The prompt holds a likely token, so the repetition penalty bites at once.
PROMPT = (7, HEADS[2])
#: Every history-dependent step, min_p, a banned token (the most likely one) and a boosted one, vllm order.
PARAMS = SamplingParams(max_new_tokens=4, temperature=0.8, min_p=0.02, repetition_penalty=1.5, frequency_penalty=0.5,
                        presence_penalty=0.5, logit_bias={HEADS[0]: -100.0, HEADS[3]: 1.0})


@pytest.fixture(scope="module")
def rc():  # noqa: ANN201
    return load_script("request_fields_calibration")


@pytest.fixture(scope="module")
def model(rc):  # noqa: ANN001, ANN201
    return rc.aa.ProcessedMarkov(*_raw(), EOS_ID)


def _case(rc, params: SamplingParams = PARAMS):  # noqa: ANN001, ANN202
    return rc.Case(case_id="fields", prompt_ids=PROMPT, params=params)


def test_joint_and_length_laws_are_those_of_rows_drawn_through_the_processed_law(rc, model) -> None:  # noqa: ANN001
    case = _case(rc)
    first = rc._law_at(model, case, ())
    assert first[HEADS[0]] < 1e-30 < first[HEADS[3]]  # the banned token, and min_p drops most of the vocabulary
    assert 2 <= (first > 0).sum() < V // 2
    joint = rc.joint_first_two(model, case, first)
    batch = model.sample(PROMPT, PARAMS, 20_000, np.random.default_rng(1))
    t, lens = batch.tokens, batch.lengths
    labels = np.where(lens >= 2, t[:, 0] * V + np.maximum(t[:, 1], 0), V * V)
    support = joint > 0
    counts = np.bincount(labels, minlength=joint.size)
    assert counts[~support].sum() == 0
    assert chisquare_gof(counts[support], joint[support], rng=np.random.default_rng(2)).pvalue > 1e-4
    # the penalties act on the row's own first token: P(x2 = x1) under the joint law fits the rows, and the pair
    # law whose penalty history misses x1 does not (the check can fail)
    tokens = np.zeros((V, 2), dtype=np.int64)
    tokens[:, 0] = np.arange(V)
    blind = model.laws(PROMPT, tokens, np.ones(V, dtype=np.int64), np.arange(V), PARAMS, generated_history=False)
    repeats = int(((lens >= 2) & (t[:, 0] == t[:, 1])).sum())
    diagonal = joint[: V * V].reshape(V, V).diagonal().sum()
    blind_diagonal = (first * blind.diagonal()).sum() - first[EOS_ID] * blind[EOS_ID, EOS_ID]
    assert blind_diagonal > 2 * diagonal
    assert binomtest(repeats, lens.size, diagonal).pvalue > 1e-4
    assert binomtest(repeats, lens.size, blind_diagonal).pvalue < 1e-6
    lengths = rc.length_law(model, case, 20_000, seed=5)
    assert chisquare_gof(np.bincount(lens, minlength=5)[1:], lengths, rng=np.random.default_rng(2)).pvalue > 1e-4


def test_grammar_laws_are_llguidances_masks_at_each_rows_state(rc) -> None:  # noqa: ANN001
    pytest.importorskip("llguidance")
    case = rc.grammar_case()
    grammar = rc.GrammarMarkov(*_raw(4), EOS_ID, case.params)
    tok = ByteTokenizer()
    start = rc._law_at(grammar, case, ())
    assert {tok.decode([int(i)]) for i in np.flatnonzero(start)} == set("abcdefghijklmnopqrstuvwxyz_")
    after = rc._law_at(grammar, case, tok.encode("run(", add_bos=False))
    assert {tok.decode([int(i)]) for i in np.flatnonzero(after)} == {"s", ")"}
    done = rc._law_at(grammar, case, tok.encode("ab():", add_bos=False))
    assert np.flatnonzero(done).tolist() == [EOS_ID]
    batch = grammar.sample(case.prompt_ids, case.params, 300, np.random.default_rng(0))
    assert all(grammar_violation(grammar.grammar, batch.tokens[r, :batch.lengths[r]].tolist()) is None for r in range(300))
    scores = rc.aa.ProcessedMarkovOracle(grammar).score([case.prompt_ids], batch, case.params)
    assert (scores.prob > 0).all()


def test_chi_square_holds_its_size_at_1e_3_on_a_min_p_penalty_law_and_the_check_can_fail(rc, model) -> None:  # noqa: ANN001
    """R = REPS (47 232) equal-group draws on the truncated first-token law; a p-value 3x too small fails the check."""
    first = rc._law_at(model, _case(rc), ())
    pv = rc.tc.homogeneity_null_pvalues(first, 3000, 3000, REPS, np.random.default_rng(10), check=20, mc_level=LEVEL)
    limit = rejection_limit(REPS, LEVEL, FACTOR)
    assert int((pv <= LEVEL).sum()) <= limit
    assert int((pv / 3 <= LEVEL).sum()) > limit


def test_comparisons_hold_their_size_on_history_dependent_rows_and_see_a_wrong_law(rc, model) -> None:  # noqa: ANN001
    """Exact draws: the exact conditional sizes average at or below the level (sign-flip: exact given the
    magnitudes), and no row holds a token of oracle probability 0. The same draws with a candidate that drops
    logit_bias (it draws the banned token): the real comparisons reject (the rows and scores are the path's)."""
    case = _case(rc)
    levels = (1e-3, 2e-5)
    exact = rc.comparison_sizes([(model, case)], 4, np.random.default_rng(0), rows=300, levels=levels)
    assert exact["flagged"] == 0 and exact["pit"].size > 1000
    assert set(exact["sizes"]) == {"fields: argmax comparison", "fields: log-likelihood comparison", "fields: PIT comparison"}
    for name, s in exact["sizes"].items():
        assert s.shape == (4, 2) and (s.mean(axis=0) <= np.array(levels) * 1.0001).all(), (name, s.mean(axis=0))
        assert (exact["pvalues"][name] > LEVEL).all()
    assert "| NO |" not in rc.format_comparisons(exact)
    wrong = rc.comparison_sizes([(model, case)], 2, np.random.default_rng(0), rows=300, levels=levels,
                                candidate_wrong="bias")
    smallest = np.vstack(list(wrong["pvalues"].values())).min(axis=0)  # per replicate, over the comparisons
    assert smallest.max() < 1e-4 and wrong["flagged"] > 0, wrong["pvalues"]


def test_the_comparison_table_flags_a_size_above_its_level(rc) -> None:  # noqa: ANN001
    """A p-value 3x too small (sizes 3x the level, tight over replicates) is a NO; one at 0.99x is not."""
    rng = np.random.default_rng(0)
    levels = (1e-3, 2e-5)
    for factor, verdict in ((3.0, "| NO |"), (0.99, "| yes |")):
        sizes = np.array(levels) * factor * (1 + 0.001 * rng.standard_normal((50, 2)))
        table = rc.format_comparisons({"sizes": {"x comparison": sizes}, "pvalues": {"x comparison": np.ones(50)},
                                       "flagged": 0, "pit": rng.random(100), "levels": levels})
        assert verdict in table, table
