"""Sequential runs on fake engines: early stops, reasons, reuse on a larger budget, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_engines import FakeEngine

from speceq.core.params import SamplingParams
from speceq.faces.cli import main
from speceq.inputs.cases import Case
from speceq.pipeline.config import RunConfig
from speceq.pipeline.runner import run
from speceq.pipeline.sequential import look_totals, planned_tests

FAKE = "fake_engines:FakeEngine"


def cases() -> list[Case]:
    return [
        Case(case_id="a", prompt_ids=(1, 2, 3), params=SamplingParams(max_new_tokens=4)),
        Case(case_id="b", prompt_ids=(4,), params=SamplingParams(temperature=0.7, max_new_tokens=3), batch_size=3,
             companions=((1, 1, 1, 1),)),
    ]


def config(out: Path, **kw) -> RunConfig:
    return RunConfig(**{"baseline": FAKE, "candidate": FAKE, "oracle": False, "samples": 3000, "seed": 3,
                        "out_dir": out, "progress": False, "tolerance": 0.15, "sequential": True, **kw})


def test_look_totals_follow_the_grid_and_end_at_the_budget() -> None:
    totals = look_totals(3000)
    assert totals[:12] == (3, 4, 5, 6, 8, 9, 10, 12, 15, 18, 21, 24)
    assert totals[-5:] == (1500, 1875, 2250, 2625, 3000)
    assert look_totals(2000) == totals[:-2]  # the first slice end >= the budget
    assert look_totals(20000)[: len(totals)] == totals  # a larger budget extends the same schedule
    assert look_totals(2) == (3,)


def test_planned_tests_depend_only_on_the_case_settings() -> None:
    a, b = cases()
    assert planned_tests(a, oracle=False, has_draft=False) == [
        "seq pair prompt 0 position 0", "seq pair joint first 2", "seq pair length",
        "seq pair prompt 0 position 1", "seq pair prompt 0 position 2", "seq pair prompt 0 position 3"]
    names = planned_tests(b, oracle=True, has_draft=True)
    assert "seq pair prompt 1 position 0" in names and "seq draft ratio comparison" in names
    assert "seq draft log-ratio comparison" in names
    assert {"seq argmax comparison", "seq log-likelihood comparison", "seq PIT comparison", "seq support comparison"} <= set(names)
    assert "seq log-likelihood comparison" not in planned_tests(b, oracle=True, has_draft=False, full_law=False)


def test_a_shifted_engine_is_stopped_early_and_says_when(tmp_path: Path) -> None:
    engines = {"baseline": FakeEngine(), "candidate": FakeEngine(shift=0.2)}
    result = run(config(tmp_path / "out"), cases(), engines=engines)
    assert result.verdict == "shifted"
    for c in result.cases:
        assert c.verdict == "shifted"
        assert c.reason.startswith("sequential: decided at n = ")
        assert " looks;" in c.reason or " look;" in c.reason
        assert c.n_baseline < 3000  # stopped before the budget
        primary = [t for t in c.tests if t.primary]
        assert primary and all(t.family == "sequential" for t in primary)
        assert min(t.adjusted_pvalue for t in primary) <= 1e-3
    saved = json.loads((tmp_path / "out" / "result.json").read_text())
    assert saved["verdict"] == "shifted"


def test_equal_engines_are_certified_and_a_larger_budget_continues_the_same_sequence(tmp_path: Path) -> None:
    out = tmp_path / "out"
    small = run(config(out, samples=700, tolerance=0.2), cases()[:1],
                           engines={"baseline": FakeEngine(), "candidate": FakeEngine()})
    assert small.verdict == "inconclusive"
    assert "rerun with a larger --samples" in small.cases[0].reason
    # the rerun reuses every stored slice (the data at a look is a prefix of the next) and goes on
    engines = {"baseline": FakeEngine(), "candidate": FakeEngine()}
    big = run(config(out, samples=20000, tolerance=0.2), cases()[:1], engines=engines)
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["chunks"]["reused"] == 2 * len(look_totals(700))  # every slice of the first run
    assert big.verdict == "equivalent", big.cases[0].reason
    assert "time-uniform TV upper bound" in big.cases[0].reason
    assert "certifies the per-position marginal TV of the case's prompt" in big.cases[0].reason  # the scope (#22)
    assert big.cases[0].tv_upper_bound < 0.2
    assert big.cases[0].n_baseline < 20000


def test_greedy_cases_are_compared_at_the_full_budget(tmp_path: Path) -> None:
    greedy = Case(case_id="g", prompt_ids=(1, 2), params=SamplingParams(temperature=0.0, max_new_tokens=3))
    result = run(config(tmp_path / "out", samples=20), [greedy],
                            engines={"baseline": FakeEngine(), "candidate": FakeEngine()})
    assert result.cases[0].n_baseline == 20  # one slice of the budget, no looks
    assert not result.cases[0].reason.startswith("sequential:")


def test_cli_sequential_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "cases.json"
    p.write_text(json.dumps({"defaults": {"max_new_tokens": 3}, "cases": [{"id": "one", "prompt_ids": [1, 2, 3]}]}))
    code = main(["run", "--baseline", FAKE, "--candidate", FAKE, "--candidate-option", "shift=0.3", "--cases", str(p),
                 "--no-oracle", "--out", str(tmp_path / "out"), "--no-progress", "--samples", "2000", "--sequential"])
    out = capsys.readouterr().out
    assert code == 1
    assert "one: sequential: decided at n = " in out


def test_sequential_oracle_comparisons_under_a_shared_oracle_error() -> None:
    """Issue #22: sequential mode had no oracle gate at all (68/100 correct runs shifted by a boundary token the
    oracle excludes). Now the oracle tests are comparison e-processes: quiet when both engines share the error,
    and a candidate alone off the baseline's law crosses."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from mismatch_aa import WorldEngine, WorldOracle, world_case

    from speceq.engines.base import SampleRequest
    from speceq.pipeline.sequential.evidence import evaluate_case
    from speceq.stats.synthetic import mismatch_world

    case = world_case()
    world = mismatch_world("boundary token", boundary_mass=2e-3)  # ~17x the rate: most runs see some
    names = planned_tests(case, oracle=True, has_draft=True)
    oracle = WorldOracle(world)

    def look(candidate: WorldEngine) -> object:
        req = SampleRequest(prompts=case.prompts, params=case.params, n=2000, seed=1)
        base = WorldEngine(world).sample(req)
        cand = candidate.sample(SampleRequest(prompts=case.prompts, params=case.params, n=2000, seed=2))
        return evaluate_case(case, base, cand, names=names, level=1e-5, alpha=1e-3,
                             scores=oracle.score(case.prompts, cand, case.params),
                             base_scores=oracle.score(case.prompts, base, case.params))

    quiet = look(WorldEngine(world))
    assert not any(t.rejects for t in quiet.tests)
    support = next(t for t in quiet.tests if t.name == "seq support comparison")
    assert support.n == 6000  # every pair of rows of the three prompts
    loud = look(WorldEngine(mismatch_world("boundary token", boundary_mass=4e-2)))  # the candidate leaks 20x more
    assert loud.first_crossing is not None and loud.first_crossing[0] == "seq support comparison"


def test_sequential_outcomes_carry_their_kind_place_and_effect_through_result_json(tmp_path: Path) -> None:
    """#43 item 2: the e-processes are data like the fixed-size tests: a kind, the (prompt, position) of a
    one-position test and the plug-in effect so far, with no interval (none is valid at a data-chosen look)."""
    from speceq.verdicts.kinds import EffectName, TestKind
    from speceq.verdicts.reasons import effect
    from speceq.verdicts.result import RunResult

    engines = {"baseline": FakeEngine(), "candidate": FakeEngine(shift=0.2)}
    result = run(config(tmp_path / "out"), cases()[:1], engines=engines)
    (case,) = result.cases
    seq_tests = [t for t in case.tests if t.family == "sequential"]
    assert [t.name for t in seq_tests] == planned_tests(cases()[0], oracle=False, has_draft=False)
    by_name = {t.name: t for t in seq_tests}
    first = by_name["seq pair prompt 0 position 0"]
    assert first.kind is TestKind.SEQ_PAIR_POSITION and (first.prompt, first.position) == (0, 0)
    assert by_name["seq pair prompt 0 position 2"].position == 2
    assert by_name["seq pair joint first 2"].kind is TestKind.SEQ_PAIR_JOINT and by_name["seq pair joint first 2"].position is None
    assert by_name["seq pair length"].kind is TestKind.SEQ_PAIR_LENGTH
    for t in seq_tests:
        assert t.effect is not None and t.effect.name == EffectName.TV and 0.0 <= t.effect.estimate <= 1.0
        assert (t.effect.low, t.effect.high, t.effect.level) == (None, None, None)
    assert first.effect.estimate > 0.05  # the shift of 0.2 moves the first token's law
    assert effect(first).startswith("max e-value ") and f"TV={first.effect.estimate:.4f}" in effect(first)
    saved = RunResult.from_json((tmp_path / "out" / "result.json").read_text())
    assert saved.cases[0].tests == case.tests


def test_sequential_oracle_comparisons_carry_the_row_score_difference_as_their_effect() -> None:
    from speceq.stats.sequential import paired_sign_eprocess
    from speceq.verdicts.kinds import EffectName, TestKind
    from speceq.verdicts.sequential import eprocess_effect, sequential_outcomes

    base, cand = [0.1, 0.2, 0.3, 0.4], [0.3, 0.2, 0.6, 0.5]
    res = paired_sign_eprocess(base, cand, name="seq argmax comparison", level=1e-3)
    assert res.effect == pytest.approx(0.15)
    (out,) = sequential_outcomes([res], 4, [TestKind.SEQ_ARGMAX_COMPARISON], [None])
    assert out.kind is TestKind.SEQ_ARGMAX_COMPARISON and out.effect.name == EffectName.ROW_SCORE_DIFFERENCE
    assert out.effect.estimate == pytest.approx(0.15) and out.effect.high is None and out.adjusted_pvalue <= 1.0
    flags = paired_sign_eprocess([0.0, 0.0, 1.0], [1.0, 0.0, 1.0], name="seq support comparison", level=1e-3)
    assert eprocess_effect(TestKind.SEQ_SUPPORT_COMPARISON, flags).name == EffectName.ROW_RATE_DIFFERENCE
    empty = paired_sign_eprocess([], [], name="seq argmax comparison", level=1e-3)
    assert eprocess_effect(TestKind.SEQ_ARGMAX_COMPARISON, empty) is None  # no observation: no estimate
