"""A candidate that declares itself lossy (``describe()["lossless"]`` False) is measured, not judged.

The seeded mismatch world's engines sample T = 1.04 against the oracle's T = 1: a real difference.
Declared lossless it is ``shifted``; declared lossy the same rows are ``lossy``, every case with its
distance (the held-out TV with its bounds), exit code 1, never ``shifted`` or ``equivalent``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from speceq.pipeline.config import RunConfig
from speceq.pipeline.runner import run
from speceq.stats.synthetic import mismatch_world
from speceq.verdicts.decide import PooledDecision, declare_lossy
from speceq.verdicts.reasons import plain_case_summary, plain_run_summary
from speceq.verdicts.result import RunResult
from speceq.verdicts.verdict import Verdict

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from mismatch_aa import WorldEngine, WorldOracle, world_case  # noqa: E402

WORLD = mismatch_world("temperature 1.04")


class LossyEngine(WorldEngine):
    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "lossless": False}


def run_world(tmp: Path, candidate: Any) -> RunResult:
    cfg = RunConfig(samples=1500, out_dir=tmp, progress=False, workers=1)
    return run(cfg, [world_case()], engines={"baseline": WorldEngine(WORLD, law="oracle"), "candidate": candidate},
               oracle=WorldOracle(WORLD))


def test_a_declared_lossy_candidate_is_lossy_with_its_distance(tmp_path: Path) -> None:
    judged = run_world(tmp_path / "lossless", WorldEngine(WORLD, law="engine"))
    assert judged.verdict == Verdict.SHIFTED  # the same difference, declared lossless
    result = run_world(tmp_path / "lossy", LossyEngine(WORLD, law="engine"))
    (case,) = result.cases
    assert result.verdict == Verdict.LOSSY and result.verdict.exit_code == 1
    assert case.verdict == Verdict.LOSSY and case.size is not None
    assert case.size.low is not None and case.size.high is not None and case.size.low <= case.size.estimate <= case.size.high
    assert case.reason.startswith("declared lossy by the engine, so measured, not judged: size: ")
    assert "the tests said shifted" in case.reason
    assert "lossy by design" in plain_run_summary(result) and "measured, not judged" in plain_case_summary(case, 1e-3)
    again = RunResult.from_json(result.to_json())  # the word survives result.json
    assert again.verdict == Verdict.LOSSY and again.cases[0].verdict == Verdict.LOSSY


def test_declare_lossy_turns_every_decision_and_a_pooled_rejection() -> None:
    from speceq.verdicts.decide import CaseDecision

    decisions = [CaseDecision(case_id="a", verdict="equivalent", reason="fine", tests=(), tv_estimate=0.01,
                              tv_upper_bound=0.04)]
    evidence = [type("E", (), {"size": None, "greedy": None})()]
    out, pooled = declare_lossy(evidence, decisions, PooledDecision(rejects=True, reason="pooled rejects"))
    assert out[0].verdict == Verdict.LOSSY and "TV estimate 0.0100, upper bound 0.0400" in out[0].reason
    assert "the tests said equivalent: fine" in out[0].reason
    assert not pooled.rejects and "measured, not judged" in pooled.reason
