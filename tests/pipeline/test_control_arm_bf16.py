"""The numerics control arm on the bundled models in bfloat16, through ``speceq.run`` with engine specs.

The candidate runs in bf16 against the float32 baseline, with ``numerics_control="auto"`` (the
baseline engine with the candidate's ``dtype``): the reference engine is not shifted, and the
gallery's temperature mutant, in bf16 too, is still shifted against the control, so the control
does not hide a bug. The mutant's run reuses the first run's baseline and control chunks (the
store keys them by role, engine and case, not by the candidate). Seeded; about a minute on one core.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from speceq.core.params import SamplingParams
from speceq.inputs.cases import Case
from speceq.models import ByteTokenizer
from speceq.pipeline.config import RunConfig
from speceq.pipeline.runner import run
from speceq.verdicts.result import RunResult

SAMPLES = 400  # per engine; tests/test_numerics_control.py: the mutant is rejected at 400 bf16 rows against bf16


@pytest.fixture(scope="module")
def case() -> Case:
    # temperature 0.7: the mutant verifies the target at T = 1 instead
    return Case(case_id="def-t07", prompt_ids=tuple(ByteTokenizer().encode("def ")), batch_size=100,
                params=SamplingParams(temperature=0.7, max_new_tokens=4))


def controlled(candidate: str, case: Case, out: Path) -> RunResult:
    config = RunConfig(candidate=candidate, candidate_options={"dtype": "bfloat16"}, numerics_control="auto",
                       samples=SAMPLES, chunk_size=200, seed=46, out_dir=out, progress=False, workers=1, threads=1)
    return run(config, [case])


@pytest.fixture(scope="module")
def reference_run(case: Case, tmp_path_factory: pytest.TempPathFactory) -> tuple[RunResult, Path]:
    out = tmp_path_factory.mktemp("reference")
    return controlled("reference", case, out), out


def test_the_bf16_reference_with_the_control_is_not_shifted(reference_run: tuple[RunResult, Path]) -> None:
    result, _ = reference_run
    assert result.verdict != "shifted", result.cases[0].reason
    control = result.numerics_control
    assert control is not None and (control.baseline, control.candidate) == ("float32 on cpu", "bfloat16 on cpu")
    assert result.engines["control"]["model"]["dtype"] == "bfloat16"
    assert result.engines["baseline"]["model"]["dtype"] == "float32"


def test_the_bf16_temperature_mutant_with_the_control_is_still_shifted(
        case: Case, reference_run: tuple[RunResult, Path], tmp_path: Path) -> None:
    _, first = reference_run
    for role in ("baseline", "control"):
        shutil.copytree(first / "chunks" / role, tmp_path / "chunks" / role)
    result = controlled("mutant:target-no-temperature", case, tmp_path)
    assert result.verdict == "shifted"
    assert result.cases[0].reason.startswith("speculation shift against the numerics control")
    chunks = result.provenance["chunks"]
    # reused: the baseline's and the control's (twice the candidate's samples, the default ratio); sampled: the candidate's
    assert chunks["reused"] == (1 + 2) * SAMPLES // 200 and chunks["sampled"] == SAMPLES // 200
