"""The analysis glue on synthetic samples: a fake i.i.d. sampler and a fake exact oracle.

Tokens at every position are drawn i.i.d. from a per-position law, so the exact oracle law
of each token is known without a model and the glue's decisions can be checked exactly.
"""

from __future__ import annotations

import numpy as np
import pytest

from speceq.analysis import analyse_run
from speceq.cases import Case
from speceq.engines.base import PAD_OUT, SampleBatch, row_layout
from speceq.params import SamplingParams
from speceq.stats.scores import TokenScores
from speceq.stats.synthetic import scores_from_probs

VOCAB = 259
EOS = 257


def law(seed: int, shift: float = 0.0) -> np.ndarray:
    """A peaked law over 12 byte tokens (entropy ~2 nats), optionally moving mass to token 70."""
    rng = np.random.default_rng(seed)
    p = np.zeros(VOCAB)
    p[60:72] = rng.dirichlet(np.full(12, 2.0))
    if shift:
        p = (1 - shift) * p
        p[70] += shift
    return p / p.sum()


def sample(p: np.ndarray, prompts: int, n: int, L: int, seed: int, wall: float = 1.0) -> SampleBatch:
    rng = np.random.default_rng(seed)
    rows = prompts * n
    tokens = rng.choice(VOCAB, size=(rows, L), p=p).astype(np.int64)
    return SampleBatch(tokens=tokens, lengths=np.full(rows, L, dtype=np.int64), prompt_index=row_layout(prompts, n),
                       wall_time_s=wall)


class ExactOracle:
    """Fake oracle: every position's exact law is ``p`` whatever the prefix."""

    vocab_size = VOCAB

    def __init__(self, p: np.ndarray, margin: float = 5.0) -> None:
        self.p = p
        self.margin = margin

    def describe(self) -> dict:
        return {"model": "exact fake"}

    def score(self, prompts, batch: SampleBatch, params) -> TokenScores:
        inside = np.arange(batch.tokens.shape[1])[None, :] < batch.lengths[:, None]
        tok = batch.tokens[inside]
        s = scores_from_probs(np.broadcast_to(self.p, (tok.size, VOCAB)), tok)
        rows, pos = np.nonzero(inside)
        return TokenScores(**{**{f: getattr(s, f) for f in s.__dataclass_fields__}, "row": rows.astype(np.int64),
                              "position": pos.astype(np.int64)})

    def next_token_probs(self, prefixes, params) -> np.ndarray:
        return np.tile(self.p, (len(prefixes), 1))

    def raw_top2_margin(self, prefixes) -> np.ndarray:
        return np.full(len(prefixes), self.margin)


def case(cid: str, **kw) -> Case:
    params = SamplingParams(max_new_tokens=kw.pop("L", 4), ignore_eos=True, temperature=kw.pop("T", 1.0))
    return Case(case_id=cid, prompt_ids=(100, 101), params=params, **kw)


def run(cases, base, cand, oracle=None, tolerance=0.1):
    return analyse_run(cases, base, cand, oracle=oracle, alpha=1e-3, tolerance=tolerance, seed=0,
                       engines={"baseline": {}, "candidate": {}}, provenance={})


def test_same_law_is_equivalent_black_box() -> None:
    p = law(0)
    c = case("same")
    r = run([c], {"same": sample(p, 1, 20000, 4, 1)}, {"same": sample(p, 1, 20000, 4, 2)})
    cr = r.cases[0]
    assert cr.verdict == "equivalent", cr.reason
    assert cr.tv_upper_bound < 0.1 and cr.tv_estimate <= cr.tv_upper_bound
    assert all(t.adjusted_pvalue > 1e-3 for t in cr.tests if t.primary)
    assert r.exit_code == 0


def test_shift_is_detected_and_the_moved_token_is_on_top() -> None:
    c = case("moved")
    r = run([c], {"moved": sample(law(0), 1, 5000, 4, 1)}, {"moved": sample(law(0, shift=0.05), 1, 5000, 4, 2)})
    cr = r.cases[0]
    assert cr.verdict == "shifted", cr.reason
    assert r.verdict == "shifted" and r.exit_code == 1
    first = [t for t in cr.top_tokens if t.position == 0]
    moved = max(first, key=lambda t: t.candidate_count - t.baseline_count)
    assert moved.token == 70


def test_small_sample_is_inconclusive_with_required_n() -> None:
    p = law(0)
    c = case("small")
    r = run([c], {"small": sample(p, 1, 300, 4, 1)}, {"small": sample(p, 1, 300, 4, 2)}, tolerance=0.05)
    cr = r.cases[0]
    assert cr.verdict == "inconclusive"
    assert cr.required_n is not None and cr.required_n > 300
    assert r.exit_code == 3


def test_oracle_tests_reject_a_candidate_off_the_target() -> None:
    p = law(0)
    c = case("oracle", companions=((5, 6, 7),))
    base = sample(p, 2, 3000, 4, 1)
    good = run([c], {"oracle": base}, {"oracle": sample(p, 2, 3000, 4, 2)}, oracle=ExactOracle(p))
    bad = run([c], {"oracle": base}, {"oracle": sample(law(0, shift=0.03), 2, 3000, 4, 2)}, oracle=ExactOracle(p))
    names = {t.name for t in good.cases[0].tests if t.primary}
    assert {"PIT Anderson-Darling", "z argmax leak", "z temperature drift", "chi2 GOF first token"} <= names
    assert good.cases[0].verdict != "shifted"
    assert bad.cases[0].verdict == "shifted"
    assert len(good.cases[0].pit_histogram) == 20


def test_zero_probability_token_is_a_hard_failure_naming_the_prefix() -> None:
    p = law(0)
    c = case("zero")
    cand = sample(p, 1, 500, 4, 2)
    cand.tokens[3, 2] = 5  # token 5 has probability 0 under p
    r = run([c], {"zero": sample(p, 1, 500, 4, 1)}, {"zero": cand}, oracle=ExactOracle(p))
    cr = r.cases[0]
    assert cr.verdict == "shifted"
    assert "row 3" in cr.hard_failures[0] and "position 2" in cr.hard_failures[0]


def test_holm_is_across_the_whole_run() -> None:
    p = law(0)
    cases = [case(f"c{i}") for i in range(3)]
    base = {c.case_id: sample(p, 1, 2000, 4, 10 + i) for i, c in enumerate(cases)}
    cand = {c.case_id: sample(p, 1, 2000, 4, 20 + i) for i, c in enumerate(cases)}
    r = run(cases, base, cand)
    primaries = [t for c in r.cases for t in c.tests if t.primary]
    m = len(primaries)
    smallest = min(primaries, key=lambda t: t.pvalue)
    assert smallest.adjusted_pvalue == pytest.approx(min(1.0, m * smallest.pvalue))


def greedy_batch(rows: list[list[int]]) -> SampleBatch:
    L = max(map(len, rows))
    tok = np.full((len(rows), L), PAD_OUT, dtype=np.int64)
    for i, r in enumerate(rows):
        tok[i, : len(r)] = r
    return SampleBatch(tokens=tok, lengths=np.array([len(r) for r in rows]), prompt_index=np.zeros(len(rows), np.int64))


@pytest.mark.parametrize(
    ("margin", "with_oracle", "verdict"),
    [(5.0, True, "shifted"), (1e-5, True, "equivalent"), (None, False, "inconclusive")],
)
def test_greedy_divergence_is_classified(margin, with_oracle, verdict) -> None:
    c = case("greedy", T=0.0, L=3)
    base = greedy_batch([[65, 66, 67]] * 4)
    cand = greedy_batch([[65, 66, 67]] * 3 + [[65, 70, 71]])
    oracle = ExactOracle(law(0), margin=margin) if with_oracle else None
    cr = run([c], {"greedy": base}, {"greedy": cand}, oracle=oracle).cases[0]
    assert cr.verdict == verdict, cr.reason
    assert cr.greedy.rows_equal == 3
    (d,) = cr.greedy.divergences
    assert (d.position, d.baseline_token, d.candidate_token) == (1, 66, 70)


def test_greedy_equal_rows_are_equivalent() -> None:
    c = case("g", T=0.0, L=3)
    rows = greedy_batch([[65, 66, 67]] * 4)
    cr = run([c], {"g": rows}, {"g": rows}).cases[0]
    assert cr.verdict == "equivalent" and "4 of 4" in cr.reason


def test_result_round_trips_through_json() -> None:
    from speceq.verdicts.result import RunResult

    p = law(0)
    c = case("json", companions=((5, 6),))
    r = run([c], {"json": sample(p, 2, 500, 4, 1)}, {"json": sample(p, 2, 500, 4, 2)}, oracle=ExactOracle(p))
    assert RunResult.from_json(r.to_json()) == r
    df = r.to_dataframe()
    assert set(df["case_id"]) == {"json"} and df["pvalue"].between(0, 1).all()
