"""A case's own ``seed``: runs of the case with the same seed give the same rows, whatever the run seed.

The run derives the case's chunk seeds from the case's seed instead of the run's, and the built-in
engines draw every random number from the request seed, so two runs agree row for row (a repeatability
property, checked here and by the pytest face's ``speceq.repeatability`` note, not a distribution test).
An engine that does not declare ``seed`` refuses such a case before sampling.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fake_engines import FakeEngine

from speceq.core.params import SamplingParams
from speceq.engines.base import SampleRequest, check_sampling_support
from speceq.engines.baseline import BaselineEngine
from speceq.engines.function import FunctionEngine
from speceq.engines.reference import ReferenceSpeculativeEngine
from speceq.errors import ConfigError
from speceq.faces.pytest_support.probes import repeatability
from speceq.inputs.cases import Case, parse_cases
from speceq.pipeline.config import RunConfig
from speceq.pipeline.plan import case_run_seed, plan_chunks
from speceq.pipeline.runner import run
from speceq.pipeline.sequential.driver import STORE_SUBDIR
from speceq.store import load_samples_frame


def seeded(seed: int | None, cid: str = "s") -> Case:
    return Case(case_id=cid, prompt_ids=(5, 17, 99), params=SamplingParams(max_new_tokens=5, seed=seed),
                batch_size=4, companions=((7,),))


def rows_of(out: Path) -> list[tuple[str, str, tuple[int, ...]]]:
    frame = load_samples_frame(out)
    return [(e, c, tuple(t)) for e, c, t in zip(frame["engine"], frame["case"], frame["tokens"], strict=True)]


def two_runs(tmp_path: Path, target, close_draft, case: Case, seeds: tuple[int, int], *, sequential: bool = False):
    out = []
    for i, run_seed in enumerate(seeds):
        engines = {"baseline": BaselineEngine(target),
                   "candidate": ReferenceSpeculativeEngine(target, close_draft, k=3)}
        cfg = RunConfig(baseline="x", candidate="y", oracle=False, samples=24, chunk_size=12, seed=run_seed,
                        out_dir=tmp_path / f"run{i}", progress=False, sequential=sequential)
        run(cfg, [case], engines=engines)
        out.append(rows_of(tmp_path / f"run{i}" / (STORE_SUBDIR if sequential else "")))
    return out


@pytest.mark.parametrize("sequential", [False, True])
def test_two_runs_with_the_case_seed_give_the_same_rows_whatever_the_run_seed(tmp_path, target, close_draft,
                                                                             sequential) -> None:
    a, b = two_runs(tmp_path, target, close_draft, seeded(1234), (1, 2), sequential=sequential)
    assert len(a) >= 48 and a == b


def test_without_a_case_seed_the_run_seed_decides(tmp_path, target, close_draft) -> None:
    a, b = two_runs(tmp_path, target, close_draft, seeded(None), (1, 2))
    assert len(a) == len(b) and a != b
    c, d = two_runs(tmp_path / "other", target, close_draft, seeded(1234), (1, 1))
    e, _ = two_runs(tmp_path / "third", target, close_draft, seeded(4321), (1, 1))
    assert c == d and c != e  # another case seed, other rows


def test_chunk_seeds_follow_the_case_seed() -> None:
    engines = {"baseline": FakeEngine(), "candidate": FakeEngine()}

    def seeds(run_seed: int, case: Case) -> list[int]:
        cfg = RunConfig(baseline="x", candidate="y", oracle=False, samples=30, chunk_size=10, seed=run_seed,
                        progress=False)
        return [c.seed for c in plan_chunks(cfg, [case], engines)]

    assert seeds(1, seeded(7)) == seeds(2, seeded(7))
    assert seeds(1, seeded(None)) != seeds(2, seeded(None))
    assert len(set(seeds(1, seeded(7)))) == 6  # chunks and roles stay independent
    assert case_run_seed(5, seeded(None)) == 5 and case_run_seed(5, seeded(9)) == 9


def test_an_engine_that_does_not_declare_seed_refuses_it(tmp_path) -> None:
    with pytest.raises(ConfigError, match="case 's'.seed: engine 'fake' cannot apply seed"):
        check_sampling_support(FakeEngine(), seeded(3).params, "s")
    engines = {"baseline": FakeEngine(), "candidate": FakeEngine()}
    cfg = RunConfig(baseline="x", candidate="y", oracle=False, samples=20, seed=1, out_dir=tmp_path / "o",
                    progress=False)
    with pytest.raises(ConfigError, match="case 's'.seed: the baseline engine 'fake' cannot apply seed"):
        run(cfg, [Case(case_id="s", prompt_ids=(1, 2), params=SamplingParams(max_new_tokens=2, seed=3))],
            engines=engines)


def draw(prompt_ids, n, params, seed):  # noqa: ANN001, ANN201
    rng = np.random.default_rng(seed)
    return [list(rng.integers(0, 8, params.max_new_tokens)) for _ in range(n)]


def test_repeatability_note_uses_the_case_seed_and_refuses_an_undeclared_one() -> None:
    params = seeded(77).params
    request = SampleRequest(prompts=((1, 2),), params=params, n=10, seed=77)
    plain = FunctionEngine(draw, vocab_size=8, eos_token_id=None, name="plain")
    with pytest.raises(ConfigError, match="cannot apply seed"):
        repeatability(plain, request, case_id="s")
    draw.sampling_fields = {"seed": ("vllm", "hf")}
    try:
        honours = FunctionEngine(draw, vocab_size=8, eos_token_id=None, name="honours")
        rep = repeatability(honours, request, case_id="s")
    finally:
        del draw.sampling_fields
    assert rep.repeatable and "(seed 77): all 10 rows identical" in rep.summary()


def test_seed_parses_and_bad_values_name_the_case_and_field() -> None:
    (c,) = parse_cases([{"id": "s", "prompt": "x", "seed": 42}])
    assert c.params.seed == 42 and c.to_dict()["params"]["seed"] == 42 and "seed=42" in c.params.label()
    assert "seed" not in parse_cases([{"id": "t", "prompt": "x"}])[0].to_dict()["params"]
    for bad, text in [(-1, "expected an integer in [0, 2**31)"), ("7", "expected an integer >= 0, got a string"),
                      (True, "expected an integer >= 0, got a boolean")]:
        with pytest.raises(ConfigError, match=r"case 0 \(id 's'\), field 'seed'") as e:
            parse_cases([{"id": "s", "prompt": "x", "seed": bad}])
        assert text in str(e.value)
    with pytest.raises(ConfigError, match="seed"):
        SamplingParams(seed=2**63)
