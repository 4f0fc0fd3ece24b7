"""Sequential runs and issue 46: engines that declare different numerics are named (before sampling and in every
shifted reason, with the control's need of a fixed-size run), a fixed-size size interval is not kept at a look the
data chose, ``within-tolerance`` rests on the time-uniform TV bound, and an engine whose row independence could not
be tested is named in a reason an e-process decided."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from fake_engines import FakeEngine

from speceq.core.params import SamplingParams
from speceq.inputs.cases import Case
from speceq.pipeline.config import RunConfig
from speceq.pipeline.runner import run
from speceq.stats.synthetic import mismatch_world, tempered
from speceq.verdicts.evidence import SequentialEvidence, SequentialTestEvidence
from speceq.verdicts.failures import FailureKind, HardFailure
from speceq.verdicts.kinds import TestKind
from speceq.verdicts.notes import Note, NoteKind
from speceq.verdicts.numerics_drift import FIXED_SIZE_CONTROL
from speceq.verdicts.reasons import note_line, note_lines
from speceq.verdicts.result import CaseResult, RunResult
from speceq.verdicts.sequential import SequentialDecision, apply_sequential, decide_look

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
from mismatch_aa import WorldEngine, WorldOracle, world_case  # noqa: E402


class DeclaredEngine(WorldEngine):
    """A world engine that declares numerics, as the built-in engines do under ``model``."""

    def __init__(self, world, law: str, dtype: str) -> None:
        super().__init__(world, law=law)
        self.dtype = dtype

    def describe(self) -> dict:
        return {**super().describe(), "model": {"dtype": self.dtype, "device": "cpu"}}


WORLD = mismatch_world("temperature 1.04")
#: a bug on top of the numerics (T = 1.2): crosses within a few hundred samples
BUGGY = dataclasses.replace(WORLD, engine_initial=tempered(WORLD.initial, 1.2),
                            engine_transition=tempered(WORLD.transition, 1.2))


def test_a_sequential_run_names_the_numerics_and_that_the_control_needs_a_fixed_size_run(tmp_path: Path,
                                                                                           capsys) -> None:
    cfg = RunConfig(samples=1500, out_dir=tmp_path, progress=False, workers=1, sequential=True, seed=1)
    engines = {"baseline": DeclaredEngine(WORLD, "oracle", "float32"), "candidate": DeclaredEngine(BUGGY, "engine", "bfloat16")}
    result = run(cfg, [world_case()], engines=engines, oracle=WorldOracle(WORLD))
    err = capsys.readouterr().err
    note = err.index("speceq: note: the engines declare different numerics (baseline float32 on cpu, candidate "
                     "bfloat16 on cpu)")
    assert note == 0  # the run's first words, before any sample
    assert f"{FIXED_SIZE_CONTROL}: --numerics-control" in err[note:].splitlines()[0]
    (case,) = result.cases
    assert case.verdict == "shifted" and case.reason.startswith("sequential: decided at n = ")
    assert "baseline float32 on cpu, candidate bfloat16 on cpu" in case.reason
    assert f"{FIXED_SIZE_CONTROL}: --numerics-control" in case.reason
    assert case.size is None  # the fixed-size held-out interval does not hold at the look the data chose
    assert "time-uniform upper bound" in case.reason and "held-out" not in case.reason
    numerics = [n for n in result.notes if n.kind is NoteKind.NUMERICS_DIFFER]
    assert len(numerics) == 1 and FIXED_SIZE_CONTROL in note_line(numerics[0])


def _fake_run(tmp: Path, numerics_tolerance: float) -> RunResult:
    case = Case(case_id="a", prompt_ids=(1, 2, 3), params=SamplingParams(max_new_tokens=1))
    cfg = RunConfig(baseline="fake_engines:FakeEngine", candidate="fake_engines:FakeEngine", oracle=False,
                    samples=3000, seed=3, out_dir=tmp, progress=False, tolerance=0.15, sequential=True,
                    numerics_tolerance=numerics_tolerance)
    return run(cfg, [case], engines={"baseline": FakeEngine(), "candidate": FakeEngine(shift=0.1)})


def test_within_tolerance_rests_on_the_time_uniform_bound(tmp_path: Path) -> None:
    """A crossing whose time-uniform TV bound is below the numerics tolerance is within-tolerance (exit 4);
    the same rows under a smaller tolerance are shifted and say why."""
    loose = _fake_run(tmp_path / "loose", 0.5)
    (case,) = loose.cases
    assert case.verdict == "within-tolerance" and loose.exit_code == 4, case.reason
    assert case.tv_upper_bound < 0.5 and f"at most {case.tv_upper_bound:.4f} (time-uniform upper bound" in case.reason
    assert "holds at every look at once" in case.reason
    tight = _fake_run(tmp_path / "tight", 0.01)
    assert tight.cases[0].verdict == "shifted" and tight.exit_code == 1
    assert "(not within the numerics tolerance 0.01: the time-uniform bound is not below it)" in tight.cases[0].reason
    off = _fake_run(tmp_path / "off", 0.0)
    assert off.cases[0].verdict == "shifted" and "numerics tolerance" not in off.cases[0].reason


def _look(*tests: SequentialTestEvidence, bound: float | None = 0.004, **kw) -> SequentialEvidence:
    return SequentialEvidence(**{"n": 900, "look": 30, "looks": 40, "budget": 3000, "tests": tests,
                                 "tv_upper_bound": bound, "bound_grid_n": 900, **kw})


def _crossed(name: str, kind: TestKind | None) -> SequentialTestEvidence:
    return SequentialTestEvidence(name=name, max_evalue=1e5, pvalue=1e-5, crossing_sample=800, kind=kind)


POSITION = _crossed("seq pair prompt 0 position 0", TestKind.SEQ_PAIR_POSITION)


@pytest.mark.parametrize(("look", "tolerance", "verdict", "words"), [
    (_look(POSITION), 0.01, "within-tolerance", "certified below the numerics tolerance"),
    (_look(POSITION, bound=0.02), 0.01, "shifted", "the time-uniform bound is not below it"),
    (_look(POSITION, bound=None), 0.01, "shifted", "no time-uniform TV bound yet"),
    (_look(POSITION, _crossed("seq pair joint first 2", TestKind.SEQ_PAIR_JOINT)), 0.01, "shifted",
     "the time-uniform bound does not stand for seq pair joint first 2"),
    (_look(_crossed("seq pair prompt 0 position 0", None)), 0.01, "shifted", "does not stand for seq pair prompt 0"),
    (_look(dataclasses.replace(_crossed("seq pair prompt 1 position 0", TestKind.SEQ_PAIR_POSITION), prompt=1)), 0.01,
     "shifted", "does not stand for seq pair prompt 1 position 0"),  # a companion: the bound is the case prompt's
    (_look(POSITION), 0.0, "shifted", "size: largest per-position TV at most 0.0040"),
])
def test_decide_look_within_tolerance(look, tolerance, verdict, words) -> None:
    got, reason = decide_look(look, tolerance=0.15, threshold=1e4, numerics_tolerance=tolerance)
    assert got == verdict and words in reason, reason


def test_a_hard_failure_is_never_within_tolerance() -> None:
    leak = HardFailure(kind=FailureKind.ZERO_PROBABILITY, prompt=0, position=0, token=7, prefix=(1,), vocab_size=16,
                       row=2)
    verdict, reason = decide_look(_look(POSITION, hard_failures=(leak,)), tolerance=0.15, threshold=1e4,
                                  numerics_tolerance=0.5)
    assert verdict == "shifted" and reason.startswith("sequential: decided at n = 900 samples per engine after 30 looks; hard")


UNTESTED = Note(kind=NoteKind.INDEPENDENCE_UNTESTED, values={"role": "candidate", "rows": 3, "calls": 1,
                                                              "sample_calls": 1, "batch_size": 8})


def _fixed() -> RunResult:
    case = CaseResult(case_id="a", case={}, verdict="inconclusive", reason="fixed", tolerance=0.15, n_baseline=3,
                      n_candidate=3, notes=(UNTESTED,))
    return RunResult(verdict="inconclusive", alpha=1e-3, tolerance=0.15, seed=0, engines={}, cases=(case,))


@pytest.mark.parametrize("detected", [True, False])
def test_the_untested_independence_note_reaches_a_reason_an_eprocess_decided(detected: bool) -> None:
    decision = SequentialDecision(verdict="shifted", reason="sequential: decided", looks=1, n=3, detected=detected)
    (case,) = apply_sequential(_fixed(), {"a": decision}, 6).cases
    words = note_line(UNTESTED)
    assert "not tested" in words and words in note_lines(case.notes)
    assert (f"sequential: decided; {words}" == case.reason) is detected
    assert case.size is None
