"""The support hard failure with a numerics margin, through the real fixed-size and sequential runs.

A token is a hard failure only when every law whose logits are within the margin of the
oracle's excludes it: a correct engine that shares a small error with the oracle (issue #22's
nucleus-boundary token) is never failed by it, a token far outside the support fails the case
from the first rows, fixed-size and at every sequential look.
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from speceq.core.defaults import SUPPORT_MARGIN_NATS, SUPPORT_MARGIN_OFF
from speceq.engines.base import SampleRequest
from speceq.pipeline.analysis import analyse_run
from speceq.stats.support_margin import exclusion_margins
from speceq.stats.synthetic import MismatchWorld, mismatch_world
from speceq.verdicts.reasons import note_lines

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from mismatch_aa import WorldEngine, WorldOracle, world_case  # noqa: E402


def far_leak(world: MismatchWorld, mass: float) -> MismatchWorld:
    """The engines' laws also emit the least likely token of every raw law with probability ``mass``."""
    def leak(law: np.ndarray, raw: np.ndarray) -> np.ndarray:
        out = law * (1.0 - mass)
        out[np.arange(law.shape[0]), raw.argmin(axis=1)] += mass
        return out

    return dataclasses.replace(world, engine_initial=leak(world.initial, world.raw_initial),
                               engine_transition=leak(world.transition, world.raw_transition))


#: What the engines' describe() declares: a float32 baseline and a bf16 candidate (issue #46's run).
FLOAT32_VS_BF16 = {"baseline": {"model": {"dtype": "float32", "device": "cpu"}},
                   "candidate": {"model": {"dtype": "bfloat16", "device": "cpu"}}}
BOTH_FLOAT32 = {"baseline": {"model": {"dtype": "float32", "device": "cpu"}},
                "candidate": {"model": {"dtype": "float32", "device": "cpu"}}}


def _analyse(world_base: MismatchWorld, base_law: str, world_cand: MismatchWorld, cand_law: str, n: int,
             margin: float, oracle_world: MismatchWorld, engines: dict | None = None) -> object:
    case = world_case()
    req = lambda s: SampleRequest(prompts=case.prompts, params=case.params, n=n, seed=s)  # noqa: E731
    base = WorldEngine(world_base, law=base_law).sample(req(1))
    cand = WorldEngine(world_cand, law=cand_law).sample(req(2))
    return analyse_run([case], {case.case_id: base}, {case.case_id: cand}, oracle=WorldOracle(oracle_world),
                       alpha=1e-3, tolerance=0.15, seed=0, provenance={},
                       engines=engines or {"baseline": {}, "candidate": {}},
                       support_margin_nats=margin).cases[0]


def test_the_boundary_world_is_inside_the_default_margin_and_the_far_tokens_outside() -> None:
    w = mismatch_world("boundary token")
    raw = np.concatenate([w.raw_initial, w.raw_transition])
    oracle = np.concatenate([w.initial, w.transition])
    boundary = np.argmax((oracle == 0) * raw, axis=1)  # the most likely excluded token of every law
    near = exclusion_margins(np.log(raw), boundary, temperature=1.0, top_p=w.top_p)
    far = exclusion_margins(np.log(raw), raw.argmin(axis=1), temperature=1.0, top_p=w.top_p)
    assert near.max() < SUPPORT_MARGIN_NATS / 2  # measured 0.15
    assert far.min() > 2 * SUPPORT_MARGIN_NATS


def test_a_boundary_token_only_the_candidate_emits_is_no_hard_failure_within_the_margin() -> None:
    """Issue #22's boundary world (1.2e-4 per step) with an exact baseline: the old exact-oracle rule (margin 0)
    fails the correct candidate; the default margin does not (the comparison alone sees too few to decide)."""
    w = mismatch_world("boundary token", boundary_mass=1.2e-4)
    exact = _analyse(w, "oracle", w, "engine", 3000, 0.0, w)
    assert exact.verdict == "shifted" and "exact: --support-margin-nats 0" in exact.hard_failures[0]
    default = _analyse(w, "oracle", w, "engine", 3000, SUPPORT_MARGIN_NATS, w)
    assert default.hard_failures == () and default.verdict != "shifted"


def test_a_token_far_outside_fails_from_a_few_rows_unless_the_baseline_has_one() -> None:
    w = mismatch_world("boundary token")
    bad = far_leak(w, 0.05)
    res = _analyse(w, "engine", bad, "engine", 5, SUPPORT_MARGIN_NATS, w)
    assert res.verdict == "shifted"
    assert "beyond the numerics margin" in res.hard_failures[0]
    both = _analyse(bad, "engine", bad, "engine", 5, SUPPORT_MARGIN_NATS, w)
    assert not any("numerics margin" in f for f in both.hard_failures)
    assert any("the baseline emits" in note for note in note_lines(both.notes))
    off = _analyse(w, "engine", bad, "engine", 5, SUPPORT_MARGIN_OFF, w)  # the library default: no hard failure
    assert not any("numerics margin" in f for f in off.hard_failures)


def test_a_boundary_token_of_engines_with_different_numerics_is_neither_a_hard_failure_nor_drift() -> None:
    """Issue #46: a correct bf16-like candidate (5e-3 boundary mass per step) against an exact float32-like
    baseline. Declaring the same numerics keeps the exact rule (the support comparison's hard failure);
    declaring different numerics reads the boundary tokens as numerics: no hard failure, no shifted score."""
    w = mismatch_world("boundary token", boundary_mass=5e-3)
    same = _analyse(w, "oracle", w, "engine", 3000, SUPPORT_MARGIN_NATS, w, BOTH_FLOAT32)
    assert same.verdict == "shifted" and "probability 0" in same.hard_failures[0]
    differ = _analyse(w, "oracle", w, "engine", 3000, SUPPORT_MARGIN_NATS, w, FLOAT32_VS_BF16)
    assert differ.hard_failures == () and differ.verdict != "shifted"
    ps = {t.name: t.adjusted_pvalue for t in differ.tests if t.primary}
    assert ps["support comparison"] == 1.0 and ps["draft ratio comparison"] > 1e-3
    note = next(n for n in note_lines(differ.notes) if n.startswith("numerics boundary"))
    assert "baseline float32 on cpu, candidate bfloat16 on cpu" in note and "not as a hard failure" in note
    # a token far outside the nucleus still fails the case, whatever the engines declare
    far = _analyse(w, "oracle", far_leak(w, 0.05), "engine", 5, SUPPORT_MARGIN_NATS, w, FLOAT32_VS_BF16)
    assert far.verdict == "shifted" and "beyond the numerics margin" in far.hard_failures[0]


def test_declared_numerics_come_from_the_engines_descriptions() -> None:
    from speceq.pipeline.analysis import NumericsMargin, declared_numerics

    assert declared_numerics({"model": {"dtype": "bfloat16", "device": "cpu"}}) == ("bfloat16", "cpu")
    assert declared_numerics({"dtype": "float16", "device": "cuda"}) == ("float16", "cuda")  # transformers engines
    assert declared_numerics({"engine": "openai"}) is None
    assert NumericsMargin.of(FLOAT32_VS_BF16, 0.5).nats == 0.5
    assert NumericsMargin.of(BOTH_FLOAT32, 0.5).nats == 0.0
    assert NumericsMargin.of({"baseline": {}, "candidate": FLOAT32_VS_BF16["candidate"]}, 0.5).nats == 0.0


def test_the_library_default_margin_is_off() -> None:
    import inspect

    from speceq.pipeline.config import RunConfig

    assert RunConfig().support_margin_nats == SUPPORT_MARGIN_OFF == float("inf")
    assert inspect.signature(analyse_run).parameters["support_margin_nats"].default == SUPPORT_MARGIN_OFF


def _sequential(base_world: MismatchWorld, cand_world: MismatchWorld, oracle_world: MismatchWorld,
                samples: int) -> object:
    from speceq.pipeline import runner
    from speceq.pipeline.config import RunConfig

    oracle = WorldOracle(oracle_world)
    saved = runner.make_oracle, runner.check_oracle_matches, runner.oracle_sources
    runner.make_oracle = lambda spec, engines: oracle
    runner.check_oracle_matches = lambda o, engines: None
    runner.oracle_sources = lambda spec, engines: (None, None)
    try:
        with tempfile.TemporaryDirectory() as out:
            config = RunConfig(baseline="world", candidate="world", samples=samples, seed=3, out_dir=Path(out),
                               progress=False, tolerance=0.15, alpha=1e-3, sequential=True,
                               support_margin_nats=SUPPORT_MARGIN_NATS)
            return runner.run(config, [world_case()], engines={"baseline": WorldEngine(base_world),
                                                               "candidate": WorldEngine(cand_world)}).cases[0]
    finally:
        runner.make_oracle, runner.check_oracle_matches, runner.oracle_sources = saved


@pytest.mark.parametrize("leak", [0.05])
def test_sequential_looks_fail_a_far_token_at_the_first_look(leak: float) -> None:
    w = mismatch_world("boundary token", boundary_mass=2e-3)
    res = _sequential(w, far_leak(w, leak), w, 400)
    assert res.verdict == "shifted"
    assert "after 1 look;" in res.reason and "beyond the numerics margin" in res.reason
    quiet = _sequential(w, w, w, 400)  # A/A, both engines at the boundary 17x the rate
    assert "hard failure" not in quiet.reason
