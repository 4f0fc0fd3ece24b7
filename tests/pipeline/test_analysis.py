"""The analysis glue on synthetic samples: a fake i.i.d. sampler and a fake exact oracle.

Tokens at every position are drawn i.i.d. from a per-position law, so the exact oracle law
of each token is known without a model and the glue's decisions can be checked exactly.
"""

from __future__ import annotations

import numpy as np
import pytest

from speceq.core.params import SamplingParams
from speceq.engines.base import PAD_OUT, SampleBatch, row_layout
from speceq.inputs.cases import Case
from speceq.pipeline.analysis import analyse_run
from speceq.stats.scores import TokenScores
from speceq.stats.synthetic import scores_from_probs
from speceq.verdicts.reasons import note_lines
from speceq.verdicts.result import POOLED_CASE_ID, RunResult

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
    eos_token_id = None
    has_draft = False

    def knows_full_law(self, params) -> bool:
        return True

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
        prefixes = [list(prompts[int(batch.prompt_index[r])]) + list(batch.tokens[r, :t]) for r, t in zip(rows, pos)]
        return TokenScores(**{**{f: getattr(s, f) for f in s.__dataclass_fields__}, "row": rows.astype(np.int64),
                              "position": pos.astype(np.int64),
                              "raw_top2_margin": np.asarray(self._margins(prefixes), dtype=np.float64)})

    def next_token_probs(self, prefixes, params) -> np.ndarray:
        return np.tile(self.p, (len(prefixes), 1))

    def _margins(self, prefixes) -> np.ndarray:
        return np.full(len(prefixes), self.margin)

    def raw_top2_margin(self, prefixes) -> np.ndarray:
        return self._margins(prefixes)


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
    # the sizes come from the law estimated on the pooled counts, and the detectable shift is recorded
    assert cr.min_detectable_tv is not None and 0.0 < cr.min_detectable_tv < 1.0
    assert r.to_dict()["cases"][0]["min_detectable_tv"] == cr.min_detectable_tv


def test_oracle_tests_reject_a_candidate_off_the_target(monkeypatch: pytest.MonkeyPatch) -> None:
    """A candidate 0.08 off the target is shifted, and an oracle-comparison primary test is among the
    rejecting ones (the two-sample tests reject this shift on their own, so the verdict alone
    cannot tell whether the oracle tests work). Asserted on the family, not on test names. The
    comparisons carry the baseline's noise too: at 0.03 (3000 + 3000 rows) they do not reject."""
    import dataclasses

    import speceq.pipeline.analysis as analysis

    def oracle_rejects(result) -> bool:
        return any(t.family == "oracle comparison" and t.primary and t.adjusted_pvalue <= 1e-3 for t in result.cases[0].tests)

    p = law(0)
    c = case("oracle", companions=((5, 6, 7),))
    base = sample(p, 2, 3000, 4, 1)
    off = sample(law(0, shift=0.08), 2, 3000, 4, 2)
    good = run([c], {"oracle": base}, {"oracle": sample(p, 2, 3000, 4, 2)}, oracle=ExactOracle(p))
    bad = run([c], {"oracle": base}, {"oracle": off}, oracle=ExactOracle(p))
    names = {t.name for t in good.cases[0].tests if t.primary}
    assert {"argmax comparison", "log-likelihood comparison", "PIT comparison", "support comparison"} <= names
    diagnostics = {t.name for t in good.cases[0].tests if not t.primary}
    assert {"PIT Anderson-Darling", "z argmax leak", "baseline z argmax leak", "z temperature drift",
            "chi2 GOF first token"} <= diagnostics
    assert good.cases[0].verdict != "shifted" and not oracle_rejects(good)
    assert bad.cases[0].verdict == "shifted" and oracle_rejects(bad), bad.cases[0].reason
    assert len(good.cases[0].pit_histogram) == 20
    # planted bug: every oracle test's p-value forced to 1 before the decision; still "shifted", but no oracle rejection
    decide = analysis.decide_run_pooled

    def blind(evidence, pooled, **kwargs):
        return decide([dataclasses.replace(e, tests=tuple(dataclasses.replace(t, pvalue=1.0) if t.family.startswith("oracle")
                                                          else t for t in e.tests)) for e in evidence], pooled, **kwargs)

    monkeypatch.setattr(analysis, "decide_run_pooled", blind)
    planted = run([c], {"oracle": base}, {"oracle": off}, oracle=ExactOracle(p))
    assert planted.cases[0].verdict == "shifted" and not oracle_rejects(planted)


def test_zero_probability_tokens_only_in_the_candidate_are_a_hard_failure_naming_the_prefix() -> None:
    """A hard failure needs the baseline clean and the candidate's excess significant at the first Holm step."""
    p = law(0)
    c = case("zero")
    cand = sample(p, 1, 500, 4, 2)
    cand.tokens[3:33, 2] = 5  # token 5 has probability 0 under p: 30 rows
    r = run([c], {"zero": sample(p, 1, 500, 4, 1)}, {"zero": cand}, oracle=ExactOracle(p))
    cr = r.cases[0]
    assert cr.verdict == "shifted" and cr.reason.startswith("hard failure")
    assert "30 of 500 candidate rows" in cr.hard_failures[0] and "none" in cr.hard_failures[0]
    assert "row 3" in cr.hard_failures[0] and "position 2" in cr.hard_failures[0]
    # the same failures as records with token ids, worded once by speceq.verdicts.reasons
    from speceq.verdicts.failures import FailureKind
    from speceq.verdicts.reasons import failure_lines

    first = cr.failures[0]
    assert first.kind is FailureKind.ZERO_PROBABILITY and (first.row, first.prompt, first.position, first.token) == (3, 0, 2, 5)
    assert first.prefix == (100, 101, *cand.tokens[3, :2].tolist()) and first.vocab_size == VOCAB
    assert (first.rows_flagged, first.rows_total, first.baseline_rows) == (30, 500, 500)
    assert len(cr.failures) == 5 and [f.row for f in cr.failures] == [3, 4, 5, 6, 7]
    assert failure_lines(cr.failures) == cr.hard_failures
    assert RunResult.from_json(r.to_json()).cases[0].failures == cr.failures
    (bins,) = [b for b in cr.test_bins if b.test == "support comparison"]  # the report's picture of it
    assert bins.candidate_counts == (30, 470) and bins.baseline_counts == (0, 500)
    one = sample(p, 1, 500, 4, 2)
    one.tokens[3, 2] = 5  # a single such token: not more than chance would give a shared oracle error
    single = run([c], {"zero": sample(p, 1, 500, 4, 1)}, {"zero": one}, oracle=ExactOracle(p)).cases[0]
    assert not single.hard_failures and single.verdict != "shifted"
    support = next(t for t in single.tests if t.name == "support comparison")
    assert support.primary and support.pvalue == pytest.approx(0.5)


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
    [(5.0, True, "shifted"), (1e-5, True, "inconclusive"), (None, False, "inconclusive")],  # 4 rows: no certificate
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


def test_greedy_equal_rows_are_equivalent_once_they_certify_the_tolerance() -> None:
    """Issue #22: 4 equal rows (bound 0.82) were `equivalent` at tolerance 0.1; 66 rows certify it (0.099)."""
    c = case("g", T=0.0, L=3)
    rows = greedy_batch([[65, 66, 67]] * 4)
    few = run([c], {"g": rows}, {"g": rows}).cases[0]
    assert few.verdict == "inconclusive" and "all 4 greedy row pairs" in few.reason and few.required_n == 66
    assert 0 < few.tv_upper_bound < 1 and few.tv_estimate is None  # the share of pairs that differ is no TV
    rows = greedy_batch([[65, 66, 67]] * 66)
    enough = run([c], {"g": rows}, {"g": rows}).cases[0]
    assert enough.verdict == "equivalent" and enough.tv_upper_bound < 0.1 and "whole greedy rows" in enough.reason


def test_greedy_rows_after_a_near_tie_are_teacher_forced() -> None:
    """Issue #22: a row that left the baseline's at a near-tie was never checked again; now every later
    token must be the target's argmax or a near-tie."""
    c = case("g", T=0.0, L=4)
    top = int(np.argmax(law(0)))
    base = greedy_batch([[65, 66, top, top]] * 200)
    follows = greedy_batch([[65, 66, top, top]] * 199 + [[65, 70, top, top]])  # near-tie at 66 -> 70, then argmax
    wanders = greedy_batch([[65, 66, top, top]] * 199 + [[65, 70, top, 61]])  # ... then a token off the argmax
    oracle = MarginOracle(law(0), {65: 1e-5}, default=5.0)
    ok = run([c], {"g": base}, {"g": follows}, oracle=oracle).cases[0]
    assert ok.verdict == "equivalent", ok.reason
    assert "teacher-forced through the oracle" in ok.reason
    bad = run([c], {"g": base}, {"g": wanders}, oracle=oracle).cases[0]
    assert bad.verdict == "shifted" and "teacher-forced" in bad.hard_failures[0] and "position 3" in bad.hard_failures[0]
    (off,) = bad.failures
    assert (off.kind.value, off.row, off.prompt, off.position, off.token) == ("off argmax", 199, 0, 3, 61)
    assert off.prefix == (100, 101, 65, 70, top) and off.margin_nats == 5.0
    (divergence,) = bad.greedy.divergences
    assert divergence.prefix_ids == (100, 101, 65) and divergence.rows == 1
    assert (divergence.baseline_token, divergence.candidate_token, divergence.position) == (66, 70, 1)
    assert RunResult.from_json(run([c], {"g": base}, {"g": wanders}, oracle=oracle).to_json()).cases[0] == bad


def test_greedy_shifted_carries_its_size_and_counts_near_ties_apart() -> None:
    """Issue 46: a shifted greedy case printed "TV 1.000, TV bound 1.000" and no size; its size is the share of
    row pairs diverging beyond a near-tie (a first mismatch, or off the argmax after a near-tie), with its
    Clopper-Pearson interval, and the pairs that diverge only at near-ties are counted apart."""
    from speceq.stats import clopper_pearson

    c = case("g", T=0.0, L=4)
    top = int(np.argmax(law(0)))
    base = greedy_batch([[65, 66, top, top]] * 200)
    cand = greedy_batch([[65, 66, top, top]] * 190
                        + [[65, 70, top, top]] * 4  # near-tie at 66 -> 70, then the argmax: not counted
                        + [[65, 70, top, 61]] * 3  # near-tie, then off the argmax: counted
                        + [[65, 66, 61, top]] * 3)  # a mismatch (margin 5 nats): counted
    oracle = MarginOracle(law(0), {65: 1e-5}, default=5.0)
    result = run([c], {"g": base}, {"g": cand}, oracle=oracle)  # alpha 1e-3
    cr = result.cases[0]
    assert cr.verdict == "shifted" and cr.tv_estimate is None
    assert (cr.greedy.mismatches, cr.greedy.near_ties, cr.greedy.rows_beyond_near_tie) == (3, 7, 6)
    want = clopper_pearson(6, 200, 1e-3)
    assert cr.size is not None and cr.size.name == "greedy row pairs diverging beyond a near-tie"
    assert (cr.size.estimate, cr.size.low, cr.size.high, cr.size.level) == (want.estimate, want.low, want.high, want.level)
    assert "size: 3.0% of the greedy row pairs" in cr.reason and "held-out" not in cr.reason
    assert "4 more row pairs diverge only at numerical near-ties" in cr.reason
    assert RunResult.from_json(result.to_json()).cases[0] == cr


def test_result_round_trips_through_json() -> None:
    from speceq.verdicts.result import RunResult

    p = law(0)
    c = case("json", companions=((5, 6),))
    r = run([c], {"json": sample(p, 2, 500, 4, 1)}, {"json": sample(p, 2, 500, 4, 2)}, oracle=ExactOracle(p))
    assert RunResult.from_json(r.to_json()) == r
    df = r.to_dataframe()
    assert set(df["case_id"]) == {"json"} and df["pvalue"].between(0, 1).all()


def test_every_test_carries_its_kind_and_effect_and_they_round_trip_through_result_json() -> None:
    import json

    from speceq.verdicts.kinds import TestKind

    p = law(0)
    cases = [case("a", companions=((5, 6),)), case("b")]
    r = run(cases, {"a": sample(p, 2, 500, 4, 1), "b": sample(p, 1, 500, 4, 3)},
            {"a": sample(law(0, shift=0.05), 2, 500, 4, 2), "b": sample(p, 1, 500, 4, 4)}, oracle=ExactOracle(p))
    tests = [t for c in r.cases for t in c.tests] + list(r.pooled_tests)
    assert r.pooled_tests and all(isinstance(t.kind, TestKind) for t in tests)
    by_kind = {t.kind for t in tests}
    assert {TestKind.CHI2_POSITION, TestKind.CHI2_JOINT, TestKind.ARGMAX_COMPARISON, TestKind.SUPPORT_COMPARISON,
            TestKind.POOLED_COMPARISON, TestKind.PIT_UNIFORMITY, TestKind.Z_ARGMAX_LEAK} <= by_kind
    for t in tests:
        if t.kind is TestKind.PIT_UNIFORMITY:
            assert t.effect is None  # a uniformity statistic is no effect size
            continue
        e = t.effect
        assert e is not None and e.name and e.unit, t.name
        if e.low is not None:
            assert e.low <= e.estimate <= e.high and 0 < e.level < 1, t.name
        if t.kind.is_chi2:  # the TV of the test's own counts, with its bound at its own level
            assert e.name == "TV" and e.low == 0.0 and 0 <= e.estimate <= e.high <= 1 and "TV=" not in t.summary
    shifted = next(t for t in r.cases[0].tests if t.name == "chi2 prompt 0 position 0")
    assert shifted.effect.estimate > 0.02  # 5 % of the mass moved to one token
    data = json.loads(r.to_json())
    stored = data["cases"][0]["tests"][0]
    assert stored["kind"] == "chi2 position" and set(stored["effect"]) == {"name", "unit", "estimate", "low", "high", "level"}
    back = RunResult.from_json(r.to_json())
    assert back == r
    assert [(t.kind, t.effect) for c in back.cases for t in c.tests] == [(t.kind, t.effect) for c in r.cases for t in c.tests]
    assert all(type(t.kind) is TestKind for c in back.cases for t in c.tests)


def test_a_result_json_written_before_kinds_and_effects_still_reads() -> None:
    from pathlib import Path

    text = (Path(__file__).parents[1] / "reports" / "data" / "result-reference-equivalent.json").read_text()
    old = RunResult.from_json(text)
    assert old.cases and all(t.kind is None and t.effect is None for c in old.cases for t in c.tests)


def first_token_batch(counts: list[int], tokens: list[int]) -> SampleBatch:
    """One-token rows with ``counts[i]`` rows of ``tokens[i]`` (shuffled by a fixed seed)."""
    col = np.repeat(np.array(tokens, dtype=np.int64), counts)
    np.random.default_rng(0).shuffle(col)
    return SampleBatch(tokens=col[:, None], lengths=np.ones(col.size, dtype=np.int64), prompt_index=np.zeros(col.size, np.int64))


@pytest.mark.parametrize("candidate", [[2400, 590, 10, 0], [2700, 290, 10, 0]])  # TV 0.17 and 0.07
def test_issue_reproduction_small_merged_bin_is_shifted_inside_a_run(candidate: list[int]) -> None:
    """Before: the Monte Carlo floor (p >= 1e-4) left TV 0.17 inconclusive and TV 0.07 equivalent
    once Holm spans 50 primary tests (here: 49 companion prompts with identical samples)."""
    companions = tuple((5, i) for i in range(49))
    c = case("mc", L=1, companions=companions)
    tokens = [65, 66, 67, 68]
    same = first_token_batch([2910, 80, 9, 1], tokens)

    def layout(first: SampleBatch) -> SampleBatch:
        parts = [first] + [same] * len(companions)
        return SampleBatch(tokens=np.concatenate([b.tokens for b in parts]),
                           lengths=np.concatenate([b.lengths for b in parts]),
                           prompt_index=np.repeat(np.arange(len(parts)), [b.rows for b in parts]))

    r = run([c], {"mc": layout(same)}, {"mc": layout(first_token_batch(candidate, tokens))})
    cr = r.cases[0]
    assert cr.verdict == "shifted", cr.reason


class MarginOracle(ExactOracle):
    """Fake oracle whose raw top-2 margin depends on the prefix: ``margins[last prefix token]``."""

    def __init__(self, p: np.ndarray, margins: dict[int, float], default: float = 1e-5) -> None:
        super().__init__(p)
        self.margins = margins
        self.default = default
        self.calls = 0

    def _margins(self, prefixes) -> np.ndarray:
        return np.array([self.margins.get(int(pre[-1]), self.default) for pre in prefixes])

    def raw_top2_margin(self, prefixes) -> np.ndarray:
        self.calls += 1
        return self._margins(prefixes)


def test_greedy_mismatch_after_many_near_ties_is_shifted() -> None:
    """Before: only the first 10 distinct divergences were classified, so a real mismatch after
    10 near-ties left the case equivalent with "TV upper bound 0.0"."""
    c = case("g", T=0.0, L=3)
    base = greedy_batch([[65, 66, 67]] * 12)
    cand = greedy_batch([[65, 66, 100 + i] for i in range(11)] + [[65, 90, 91]])  # 11 near-ties, then a mismatch
    oracle = MarginOracle(law(0), {65: 5.0, 66: 1e-5})
    cr = run([c], {"g": base}, {"g": cand}, oracle=oracle).cases[0]
    assert cr.verdict == "shifted", cr.reason
    assert cr.greedy.mismatches == 1 and cr.greedy.near_ties == 11 and cr.greedy.distinct_divergences == 12
    assert len(cr.greedy.divergences) == 10 and cr.greedy.divergences[0].classification == "mismatch"
    assert oracle.calls == 1  # every distinct prefix scored in one batched call


def test_greedy_compares_companion_rows_too() -> None:
    """Before: garbage on every companion row at temperature 0 was equivalent."""
    c = case("g", T=0.0, L=3, companions=((5, 6),))
    good = [[65, 66, 67]] * 4
    base = greedy_batch(good + good)
    base = SampleBatch(tokens=base.tokens, lengths=base.lengths, prompt_index=np.repeat([0, 1], 4))
    cand = greedy_batch(good + [[1, 2, 3]] * 4)
    cand = SampleBatch(tokens=cand.tokens, lengths=cand.lengths, prompt_index=np.repeat([0, 1], 4))
    shifted = run([c], {"g": base}, {"g": cand}, oracle=ExactOracle(law(0), margin=5.0)).cases[0]
    assert shifted.verdict == "shifted" and "prompt 1" in shifted.hard_failures[0]
    unexplained = run([c], {"g": base}, {"g": cand}).cases[0]
    assert unexplained.verdict == "inconclusive" and unexplained.greedy.rows_compared == 8


def test_greedy_near_tie_threshold_is_a_setting() -> None:
    c = case("g", T=0.0, L=3)
    base = greedy_batch([[65, 66, 67]] * 4)
    cand = greedy_batch([[65, 66, 67]] * 3 + [[65, 70, 71]])
    oracle = ExactOracle(law(0), margin=5e-3)  # a bf16-sized logit difference
    default = run([c], {"g": base}, {"g": cand}, oracle=oracle).cases[0]
    assert default.verdict == "shifted"
    relaxed = analyse_run([c], {"g": base}, {"g": cand}, oracle=oracle, alpha=1e-3, tolerance=0.1, seed=0,
                          engines={}, provenance={}, near_tie_nats=1e-2).cases[0]
    assert relaxed.verdict == "inconclusive" and relaxed.greedy.near_tie_threshold == 1e-2  # a near-tie, not a mismatch
    assert "more rows will not certify" in relaxed.reason  # 1 of 4 rows differ: TV 0.25 >= the tolerance
    assert relaxed.tv_estimate is None and relaxed.tv_upper_bound > 0.25  # 1 of 4 rows differ: never a bound of 0


class OffOracle(ExactOracle):
    """Fake oracle that gives probability 0 to a token both engines emit (a rounding-level top-p edge)."""

    def __init__(self, p: np.ndarray, dropped: int) -> None:
        q = p.copy()
        q[dropped] = 0.0
        super().__init__(q / q.sum())


def test_an_oracle_error_both_engines_share_cancels() -> None:
    """Before: the oracle was 'demoted' only when its A/A check on the baseline failed; now the comparisons
    decide always, and a token both engines emit at the oracle's support edge is no failure."""
    p = law(0)
    dropped = int(np.argsort(p)[-6])  # a token of moderate probability
    c = case("edge")
    base, cand = sample(p, 1, 3000, 4, 1), sample(p, 1, 3000, 4, 2)
    cr = run([c], {"edge": base}, {"edge": cand}, oracle=OffOracle(p, dropped)).cases[0]
    assert cr.verdict == "equivalent", cr.reason  # before the trust gate: shifted by "hard failure: ... probability 0"
    assert not cr.hard_failures
    assert {t.name for t in cr.tests if t.primary and t.family == "oracle comparison"} >= {"support comparison"}
    assert all(not t.primary for t in cr.tests if t.family == "oracle")
    assert any("the baseline too emits tokens of probability 0" in n for n in note_lines(cr.notes))
    assert any("both engines depart from the oracle" in n for n in note_lines(cr.notes))  # the offset both share, read as such
    from speceq.verdicts.notes import NoteKind  # the notes are records: their numbers and token ids, no sentence
    zero = next(n for n in cr.notes if n.kind is NoteKind.BASELINE_ZERO_PROBABILITY)
    assert zero.values["count"] >= 1 and zero.example is not None and zero.example.token == dropped and zero.text == ""
    assert any(n.kind is NoteKind.OFFSET_READING and n.values["reading"] == "shared" for n in cr.notes)


def test_inconclusive_result_carries_the_rerun_command() -> None:
    p = law(0)
    c = case("small")
    settings = {"baseline": "baseline", "candidate": "my.mod:engine", "samples": 300, "seed": 3, "alpha": 1e-3,
                "tolerance": 0.05, "out_dir": "out dir", "oracle": False, "chunk_size": 250}
    r = analyse_run([c], {"small": sample(p, 1, 300, 4, 1)}, {"small": sample(p, 1, 300, 4, 2)}, oracle=None,
                    alpha=1e-3, tolerance=0.05, seed=3, engines={}, provenance={"settings": settings})
    cr = r.cases[0]
    assert cr.verdict == "inconclusive"
    assert cr.rerun_command == (f"speceq run --baseline baseline --candidate my.mod:engine --no-oracle "
                                f"--samples {cr.required_n} --chunk-size 250 --seed 3 --alpha 0.001 --tolerance 0.05 "
                                "--out 'out dir'")


def test_a_small_shift_every_case_shares_is_caught_by_the_pooled_comparisons() -> None:
    """Twelve cases, each candidate 15 % hotter: no case alone reaches the Holm level, the pooled
    oracle comparisons do, and the run (not its cases) is shifted; the A/A run is not."""
    p = law(0)
    hot = p ** (1 / 1.15)
    hot /= hot.sum()
    cs = [case(f"c{i}") for i in range(12)]
    base = {c.case_id: sample(p, 1, 500, 4, 10 + i) for i, c in enumerate(cs)}
    cand = {c.case_id: sample(hot, 1, 500, 4, 40 + i) for i, c in enumerate(cs)}
    r = run(cs, base, cand, oracle=ExactOracle(p), tolerance=0.5)
    assert [c.verdict for c in r.cases] == ["equivalent"] * 12
    assert r.verdict == "shifted" and r.exit_code == 1
    pooled = {t.name: t for t in r.pooled_tests}
    assert set(pooled) == {"pooled argmax comparison", "pooled log-likelihood comparison", "pooled PIT comparison"}
    assert pooled["pooled log-likelihood comparison"].adjusted_pvalue < 1e-8
    assert "pooled log-likelihood comparison rejects" in r.pooled_reason and r.pooled_reason in r.summary()
    case_primary = [t for c in r.cases for t in c.tests if t.primary]
    primary = case_primary + list(r.pooled_tests)
    from speceq.stats import holm
    from speceq.verdicts.decide import POOLED_ALPHA_SHARE
    weights = [(1 - POOLED_ALPHA_SHARE) / len(case_primary)] * len(case_primary) + [POOLED_ALPHA_SHARE / 3] * 3
    expected = holm(np.array([t.pvalue for t in primary]), np.array(weights))
    assert [t.adjusted_pvalue for t in primary] == pytest.approx(expected.tolist())
    again = RunResult.from_json(r.to_json())
    assert again == r and again.pooled_tests == r.pooled_tests
    frame = r.to_dataframe()
    assert (frame["case_id"] == POOLED_CASE_ID).sum() == 3
    same = {c.case_id: sample(p, 1, 500, 4, 40 + i) for i, c in enumerate(cs)}
    aa = run(cs, base, same, oracle=ExactOracle(p), tolerance=0.5)
    assert aa.verdict != "shifted" and aa.pooled_reason == "" and len(aa.pooled_tests) == 3
    one = run(cs[:1], {"c0": base["c0"]}, {"c0": cand["c0"]}, oracle=ExactOracle(p), tolerance=0.5)
    assert one.pooled_tests == ()  # one case: its own tests are the whole evidence


def test_a_case_naming_its_tokenizer_stores_token_ids_and_its_text() -> None:
    """#47 item 4: bins keep the ids they stand for; stored labels are the case's tokenizer's text (the bundled BPE
    world's here: the same ids read as BPE tokens, not bytes), and the faces can relabel from the ids."""
    from speceq.models.bpe import load_bpe_tokenizer

    bpe = load_bpe_tokenizer()
    c = case("bpe-moved", tokenizer="bpe")
    r = run([c], {"bpe-moved": sample(law(0), 1, 5000, 4, 1)}, {"bpe-moved": sample(law(0, shift=0.05), 1, 5000, 4, 2)})
    cr = r.cases[0]
    assert cr.verdict == "shifted" and cr.case["tokenizer"] == "bpe"
    first = next(t for t in cr.top_tokens if t.token == 70)
    assert first.text == repr(bpe.decode([70], skip_special_tokens=False))
    bins = next(b for b in cr.test_bins if b.test == "chi2 prompt 0 position 0")
    assert len(bins.tokens) == len(bins.labels) and (70,) in bins.tokens
    assert bins.labels[bins.tokens.index((70,))] == first.text
    assert cr.samples[0].text == bpe.decode(list(cr.samples[0].token_ids), skip_special_tokens=False)
    plain = run([case("bytes-moved")], {"bytes-moved": sample(law(0), 1, 5000, 4, 1)},
                {"bytes-moved": sample(law(0, shift=0.05), 1, 5000, 4, 2)}).cases[0]
    assert next(t for t in plain.top_tokens if t.token == 70).text == "'F'"  # no tokenizer named: bytes, as before


def test_a_shift_in_rows_of_one_forward_batch_of_one_call_says_independence_was_not_tested() -> None:
    """300 rows per engine from one call of one forward batch (batch_size 512): the row-independence test has
    nothing to compare, so the case's notes record it with its numbers, and the shifted reason names it (the
    chi-square that decides assumes independent rows). With the rows from two calls the test runs: not said."""
    from speceq.verdicts.notes import NoteKind

    p, q = law(0), law(0, shift=0.3)
    c = case("one", batch_size=512)
    r = run([c], {"one": sample(p, 1, 300, 4, 1)}, {"one": sample(q, 1, 300, 4, 2)})
    cr = r.cases[0]
    untested = [n for n in cr.notes if n.kind is NoteKind.INDEPENDENCE_UNTESTED]
    # both engines untested for the same numbers: one note for both
    assert [dict(n.values) for n in untested] == [
        {"role": "both", "rows": 300, "calls": 1, "sample_calls": 1, "batch_size": 512}]
    assert cr.verdict == "shifted"
    assert ("; the candidate's and the baseline's row independence: not tested: all 300 rows of each come from a "
            "single forward batch (batch_size 512) of a single sample() call") in cr.reason
    # only the candidate's rows in one batch (the baseline's from two calls): its note alone
    from speceq.pipeline.plan import concat_batches

    two = concat_batches([sample(p, 1, 150, 4, 1), sample(p, 1, 150, 4, 11)])
    r1 = run([c], {"one": two}, {"one": sample(q, 1, 300, 4, 2)})
    assert [n.values["role"] for n in r1.cases[0].notes if n.kind is NoteKind.INDEPENDENCE_UNTESTED] == ["candidate"]
    assert "; the candidate's row independence: not tested: all 300 rows come from" in r1.cases[0].reason
    assert "baseline's row independence" not in r1.cases[0].reason

    split = {k: concat_batches([sample(law_, 1, 150, 4, s), sample(law_, 1, 150, 4, s + 10)])
             for k, law_, s in (("base", p, 1), ("cand", q, 2))}
    r2 = run([c], {"one": split["base"]}, {"one": split["cand"]})
    assert r2.cases[0].verdict == "shifted" and "independence" not in r2.cases[0].reason
    assert not any(n.kind is NoteKind.INDEPENDENCE_UNTESTED for n in r2.cases[0].notes)
