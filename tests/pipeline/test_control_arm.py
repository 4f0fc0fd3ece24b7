"""The numerics control arm (``numerics_control``, ``--numerics-control``) through the real fixed-size run.

A seeded mismatch world stands for a bf16 candidate against a float32 baseline: the baseline
samples the oracle's law (T = 1), the candidate and the control the engines' law (T = 1.04, the
"numerics"). Without the control the run is ``shifted`` by the numerics alone and says so; with
it the same rows are not shifted and the drift is a finding with its size; a candidate with a
bug on top of the numerics is still ``shifted`` against the control. Seconds per run.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from speceq.errors import ConfigError
from speceq.faces.cli import build_parser
from speceq.pipeline.config import RunConfig
from speceq.pipeline.runner import run
from speceq.stats.synthetic import mismatch_world, tempered
from speceq.verdicts.reasons import note_lines, plain_run_summary, settings_rerun_command
from speceq.verdicts.result import RunResult

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from mismatch_aa import WorldEngine, WorldOracle, world_case  # noqa: E402

SAMPLES = 1500  # the drift (log-likelihood comparison) is found at Z ~ -7 at 2000 rows, ~ -5 here


class DeclaredEngine(WorldEngine):
    """A world engine that declares numerics, as the built-in engines do under ``model``."""

    def __init__(self, world: Any, law: str, dtype: str) -> None:
        super().__init__(world, law=law)
        self.dtype = dtype

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "model": {"dtype": self.dtype, "device": "cpu"}}


WORLD = mismatch_world("temperature 1.04")
#: a bug on top of the numerics: the candidate samples T = 1.2 where the control samples 1.04
BUGGY = dataclasses.replace(WORLD, engine_initial=tempered(WORLD.initial, 1.2),
                            engine_transition=tempered(WORLD.transition, 1.2))


def engines(candidate_world: Any = WORLD, control: bool = True, control_dtype: str = "bfloat16") -> dict[str, Any]:
    out = {"baseline": DeclaredEngine(WORLD, "oracle", "float32"),
           "candidate": DeclaredEngine(candidate_world, "engine", "bfloat16")}
    if control:
        out["control"] = DeclaredEngine(WORLD, "engine", control_dtype)
    return out


def run_world(tmp: Path, *, control: bool, candidate_world: Any = WORLD, **config: Any) -> RunResult:
    cfg = RunConfig(samples=SAMPLES, out_dir=tmp, progress=False, workers=1,
                    numerics_control="auto" if control else None, **config)
    return run(cfg, [world_case()], engines=engines(candidate_world, control), oracle=WorldOracle(WORLD))


def test_without_the_control_numerics_alone_shift_and_the_run_says_so(tmp_path: Path, capsys) -> None:
    result = run_world(tmp_path, control=False)
    err = capsys.readouterr().err
    note = err.index("speceq: note: the engines declare different numerics (baseline float32 on cpu, candidate "
                     "bfloat16 on cpu)")
    assert "--numerics-control" in err[note:].splitlines()[0]
    assert note < err.index("speceq: chunks:")  # said before the samples were collected
    case = result.cases[0]
    assert result.verdict == "shifted" and result.numerics_control is None
    assert "baseline float32 on cpu, candidate bfloat16 on cpu" in case.reason and "--numerics-control" in case.reason
    assert json.loads((tmp_path / "provenance.json").read_text())["numerics_warning"].startswith("the engines declare")


def test_with_the_control_the_same_rows_are_not_shifted_and_the_drift_is_a_finding(tmp_path: Path, capsys) -> None:
    result = run_world(tmp_path, control=True)
    assert "speceq: note: the engines declare" not in capsys.readouterr().err
    case = result.cases[0]
    assert result.verdict != "shifted", case.reason
    control = result.numerics_control
    assert control is not None and control.baseline == "float32 on cpu" and control.candidate == "bfloat16 on cpu"
    (drift,) = control.drift
    assert drift.verdict == "shifted" and control.drift_found
    assert 0 < drift.tv_estimate < drift.tv_upper_bound < 1 and drift.n_baseline == SAMPLES
    assert drift.n_control == 2 * SAMPLES and control.control_ratio == 2  # the default: twice the candidate's rows
    assert case.n_baseline == 2 * SAMPLES and case.n_candidate == SAMPLES  # the control in the baseline's place
    assert f"rows per case: world {2 * SAMPLES}" in control.words()
    assert "Numerics drift" in plain_run_summary(result) and "candidate against the numerics control" in result.summary()
    assert set(result.engines) == {"baseline", "candidate", "control"}
    assert result.engines["control"]["model"]["dtype"] == "bfloat16"
    # the control's rows are stored beside the others, under their own role
    assert len(list((tmp_path / "chunks" / "control").rglob("*.npz"))) >= 1
    assert RunResult.from_json(result.to_json()) == result


def test_the_control_arm_resumes_from_the_store(tmp_path: Path) -> None:
    first = run_world(tmp_path, control=True)
    again = run_world(tmp_path, control=True)
    chunks = again.provenance["chunks"]
    assert chunks["reused"] == chunks["total"] and chunks["sampled"] == 0
    assert again.cases[0].reason == first.cases[0].reason
    assert again.numerics_control == first.numerics_control


def test_the_controls_rows_follow_the_ratio_and_a_larger_ratio_resumes_from_the_smaller(tmp_path: Path) -> None:
    """Chunks of 500, 1 500 samples: 3 chunks per engine; the control's 1 500 rows at ratio 1, 2 250 at 1.5 (4 x 500
    + 250), 3 000 at 2. Its first slices are the same at every ratio, so a larger ratio samples only what it adds."""
    one = run_world(tmp_path, control=True, control_ratio=1)
    assert one.numerics_control.drift[0].n_control == SAMPLES and one.cases[0].n_baseline == SAMPLES
    assert one.provenance["chunks"]["total"] == 9 and one.provenance["settings"]["control_ratio"] == 1
    assert "rows per case" not in one.numerics_control.words()
    grown = run_world(tmp_path, control=True, control_ratio=1.5)
    assert grown.numerics_control.drift[0].n_control == 2250 and grown.cases[0].n_baseline == 2250
    assert grown.provenance["chunks"] | {"discarded_unreadable": []} == {
        "total": 11, "reused": 9, "sampled": 2, "discarded_unreadable": []}
    two = run_world(tmp_path, control=True)  # the default ratio, 2: slices 4 and 5 at 500 (slice 4 was 250)
    assert two.numerics_control.drift[0].n_control == 2 * SAMPLES
    assert (two.provenance["chunks"]["reused"], two.provenance["chunks"]["sampled"]) == (10, 2)
    again = run_world(tmp_path, control=True, control_ratio=1)
    assert (again.provenance["chunks"]["reused"], again.provenance["chunks"]["sampled"]) == (9, 0)
    assert again.cases[0].reason == one.cases[0].reason and again.numerics_control == one.numerics_control


def test_a_bug_on_top_of_the_numerics_is_still_shifted_against_the_control(tmp_path: Path) -> None:
    result = run_world(tmp_path, control=True, candidate_world=BUGGY)
    assert result.verdict == "shifted"
    assert result.cases[0].reason.startswith("speculation shift against the numerics control")


def test_a_control_that_does_not_share_the_candidates_numerics_is_refused_before_sampling(tmp_path: Path) -> None:
    cfg = RunConfig(samples=SAMPLES, out_dir=tmp_path, progress=False, workers=1, numerics_control="auto")
    with pytest.raises(ConfigError, match="declares float32 on cpu but the candidate declares bfloat16 on cpu"):
        run(cfg, [world_case()], engines=engines(control_dtype="float32"), oracle=WorldOracle(WORLD))
    with pytest.raises(ConfigError, match="no 'control' entry"):
        run(cfg, [world_case()], engines=engines(control=False), oracle=WorldOracle(WORLD))
    assert not (tmp_path / "chunks").exists()


@pytest.mark.parametrize(("fields", "message"), [
    ({"numerics_control": "yes"}, "'auto'"),
    ({"numerics_control": "auto", "sequential": True}, "sequential"),
    ({"control_options": {"dtype": "bfloat16"}}, "without numerics_control"),
    ({"numerics_control": "auto", "control_ratio": 0.5}, "control_ratio.*from 1 to 64"),
    ({"numerics_control": "auto", "control_ratio": True}, "control_ratio"),
    ({"numerics_control": "auto", "control_ratio": "2"}, "control_ratio"),
    ({"numerics_control": "auto", "control_ratio": float("inf")}, "control_ratio"),
])
def test_bad_control_settings_name_the_field(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        RunConfig(**fields)
    assert err.value.where == f"run.{next(k for k in reversed(fields) if k != 'sequential')}"


def test_the_controls_samples_are_the_ratio_of_the_candidates_rounded_up() -> None:
    assert RunConfig(numerics_control="auto").control_samples(3000) == 6000
    assert RunConfig(numerics_control="auto", control_ratio=1.5).control_samples(3001) == 4502
    assert RunConfig(numerics_control="auto", control_ratio=1.1).control_samples(1000) == 1100  # not 1101


def test_the_control_spec_is_the_baseline_at_the_candidates_numerics_or_endpoint() -> None:
    auto = RunConfig(baseline_options={"target": "T"}, candidate_options={"dtype": "bfloat16", "device": "cuda", "k": 4},
                     numerics_control="auto", control_options={"threads": 2})
    assert auto.control_spec() == ("baseline", {"target": "T", "dtype": "bfloat16", "device": "cuda", "threads": 2})
    server = RunConfig(baseline="openai", baseline_options={"base_url": "http://a:8000"}, candidate="openai",
                       numerics_control="http://b:8000")
    assert server.control_spec() == ("openai", {"base_url": "http://b:8000"})
    with pytest.raises(ConfigError, match="no base_url option"):
        RunConfig(numerics_control="http://b:8000").control_spec()


def test_the_flag_parses_and_the_rerun_command_keeps_it() -> None:
    parse = build_parser().parse_args
    assert parse(["run", "--numerics-control"]).numerics_control == "auto"
    assert parse(["run", "--numerics-control", "http://b:8000"]).numerics_control == "http://b:8000"
    assert parse(["run"]).numerics_control is None
    cfg = RunConfig(numerics_control="auto", control_options={"threads": 2})
    command = settings_rerun_command(cfg.settings(), 900, world_case())
    assert "--numerics-control --control-option threads=2 --samples 900" in command
    assert parse(["run", "--numerics-control", "--control-ratio", "3"]).control_ratio == 3
    three = RunConfig(numerics_control="auto", control_ratio=3)
    assert "--numerics-control --control-ratio 3 --samples 900" in settings_rerun_command(three.settings(), 900,
                                                                                          world_case())


def test_a_sequential_run_names_the_numerics_once_in_its_shifted_reason(tmp_path: Path) -> None:
    result = run_world(tmp_path, control=False, sequential=True)
    (case,) = result.cases
    assert result.verdict == "shifted" and case.reason.startswith("sequential:")
    assert case.reason.count("--numerics-control") == 1, case.reason
    assert sum("--numerics-control" in line for line in note_lines(result.notes)) == 1


def test_a_pooled_rejection_against_the_control_keeps_the_tests_name_first() -> None:
    from speceq.verdicts.numerics_drift import pooled_against_control

    reason = "pooled draft ratio comparison rejects, Holm-adjusted p=4.6e-08 <= alpha=0.001: some case's ..."
    said = pooled_against_control(reason, "bfloat16 on cpu")
    assert said.split(":")[0] == "pooled draft ratio comparison rejects, Holm-adjusted p=4.6e-08 <= alpha=0.001"
    assert "numerics control" in said and "bfloat16 on cpu" in said
