"""The numerics control recipe of docs/explanation/numerics.md on the bundled models, in bfloat16.

Recipe: compare like with like (candidate and baseline in the deployment's dtype) and use the
oracle in that dtype too. Then a correct speculative engine is not shifted from plain
sampling, while an algorithmic bug at the same sample size is: the control tells numerics
apart from algorithm because it can fail. Seeded; about 30 s on one core.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from speceq.core.params import SamplingParams
from speceq.engines.base import SampleBatch, SampleRequest, validate_batch
from speceq.engines.registry import resolve_engine
from speceq.inputs.cases import Case
from speceq.models import ByteTokenizer
from speceq.oracles.hf import TargetOracle
from speceq.pipeline.analysis import analyse_run

DTYPE = "bfloat16"
SAMPLES = 400  # rows per engine; at 600 the mutant was rejected at adjusted p 1e-173 (oracle) and 1e-11 (two-sample only)
ALPHA = 1e-3
TOLERANCE = 0.15


@pytest.fixture(scope="module")
def case() -> Case:
    # temperature 0.7: the mutant samples the target at T = 1 instead
    return Case(case_id="def-t07", prompt_ids=tuple(ByteTokenizer().encode("def ")), batch_size=100,
                params=SamplingParams(temperature=0.7, max_new_tokens=4))


def _sample(spec: str, case: Case, seed: int) -> tuple[Any, SampleBatch]:
    engine = resolve_engine(spec, options={"dtype": DTYPE})
    request = SampleRequest(prompts=case.prompts, params=case.params, n=SAMPLES, seed=seed, batch_size=case.batch_size)
    batch = engine.sample(request)
    validate_batch(batch, request, engine)
    return engine, batch


@pytest.fixture(scope="module")
def bf16_runs(case: Case) -> dict[str, SampleBatch]:
    torch.set_num_threads(1)
    out = {}
    for seed, (role, spec) in enumerate((("baseline", "baseline"), ("reference", "reference"),
                                         ("mutant", "mutant:target-no-temperature"))):
        engine, out[role] = _sample(spec, case, seed=100 + seed)
        assert next(engine.model.parameters()).dtype == torch.bfloat16, f"{spec} did not run in {DTYPE}"
    return out


@pytest.fixture(scope="module")
def bf16_oracle() -> TargetOracle:
    return TargetOracle(dtype=DTYPE)


def _verdict(case: Case, base: SampleBatch, cand: SampleBatch, oracle: TargetOracle) -> str:
    result = analyse_run([case], {case.case_id: base}, {case.case_id: cand}, oracle=oracle, alpha=ALPHA,
                         tolerance=TOLERANCE, seed=0, engines={"baseline": {}, "candidate": {}}, provenance={})
    return result.cases[0].verdict


def test_bf16_speculation_vs_bf16_plain_is_not_shifted(case: Case, bf16_runs: dict[str, SampleBatch],
                                                       bf16_oracle: TargetOracle) -> None:
    assert _verdict(case, bf16_runs["baseline"], bf16_runs["reference"], bf16_oracle) != "shifted"


def test_bf16_temperature_mutant_vs_bf16_plain_is_shifted(case: Case, bf16_runs: dict[str, SampleBatch],
                                                          bf16_oracle: TargetOracle) -> None:
    # the same recipe at the same sample size catches an algorithmic bug: the control can fail
    assert _verdict(case, bf16_runs["baseline"], bf16_runs["mutant"], bf16_oracle) == "shifted"


def test_mutant_is_caught_by_the_two_sample_tests_alone(case: Case, bf16_runs: dict[str, SampleBatch]) -> None:
    # without any oracle (its dtype differing from the deployment's): like-with-like two-sample tests suffice
    assert _verdict(case, bf16_runs["baseline"], bf16_runs["mutant"], None) == "shifted"  # type: ignore[arg-type]
    assert _verdict(case, bf16_runs["baseline"], bf16_runs["reference"], None) != "shifted"  # type: ignore[arg-type]
