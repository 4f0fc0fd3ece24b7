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
    assert "seq pair prompt 1 position 0" in names and "seq draft drift" in names and "seq first token vs oracle" in names


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
