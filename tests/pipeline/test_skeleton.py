"""One run skeleton for both loops: every setting and every pre-sampling check reaches fixed-size and
sequential runs alike (regressions of the copy the sequential driver used to carry)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_engines import FakeEngine

from speceq.core.params import SamplingParams
from speceq.errors import ConfigError
from speceq.inputs.cases import Case
from speceq.pipeline.config import RunConfig
from speceq.pipeline.runner import run

FAKE = "fake_engines:FakeEngine"
MODES = pytest.mark.parametrize("sequential", [False, True], ids=["fixed-size", "sequential"])


def config(out: Path, **kw) -> RunConfig:
    return RunConfig(**{"baseline": FAKE, "candidate": FAKE, "oracle": False, "samples": 40, "seed": 1,
                        "out_dir": out, "progress": False, **kw})


class CountingEngine(FakeEngine):
    """A FakeEngine that records every sample() call, to show that nothing was sampled."""

    def sample(self, request):  # noqa: ANN001, ANN201
        self.calls_made = getattr(self, "calls_made", 0) + 1
        return super().sample(request)


@MODES
def test_a_greedy_case_reports_the_near_tie_threshold_of_the_run(tmp_path: Path, sequential: bool) -> None:
    greedy = Case(case_id="g", prompt_ids=(1, 2), params=SamplingParams(temperature=0.0, max_new_tokens=3))
    result = run(config(tmp_path / "out", near_tie_nats=0.05, sequential=sequential), [greedy],
                 engines={"baseline": FakeEngine(), "candidate": FakeEngine()})
    assert result.cases[0].greedy is not None
    assert result.cases[0].greedy.near_tie_threshold == 0.05
    provenance = json.loads((tmp_path / "out" / "provenance.json").read_text())
    assert provenance["settings"]["near_tie_nats"] == 0.05 and provenance["settings"]["sequential"] is sequential


@MODES
def test_a_top_k_server_oracle_is_refused_before_anything_is_sampled(tmp_path: Path, sequential: bool) -> None:
    """temperature 0.7 without top-k needs every raw log-probability: refused before the first slice."""
    case = Case(case_id="warm", prompt_ids=(1, 2), params=SamplingParams(temperature=0.7, max_new_tokens=2))
    engines = {"baseline": CountingEngine(), "candidate": CountingEngine()}
    cfg = config(tmp_path / "out", oracle=True, oracle_server="http://127.0.0.1:9", oracle_top_logprobs=4,
                 sequential=sequential)
    with pytest.raises(ConfigError, match="case 'warm' \\(server oracle\\).*temperature=0.7"):
        run(cfg, [case], engines=engines)
    assert not any(getattr(e, "calls_made", 0) for e in engines.values())
    assert not (tmp_path / "out" / "chunks").exists() and not (tmp_path / "out" / "sequential").exists()


@MODES
def test_a_prompt_outside_the_vocabulary_names_the_fixing_option_in_both_modes(tmp_path: Path, sequential: bool) -> None:
    case = Case(case_id="big", prompt_ids=(1, 99), params=SamplingParams(max_new_tokens=2))
    # FakeEngine takes no vocab_size option, so none is suggested (#47)
    with pytest.raises(ConfigError, match="this engine declares its vocabulary itself .it takes no vocab_size option."):
        run(config(tmp_path / "out", sequential=sequential), [case],
            engines={"baseline": FakeEngine(), "candidate": FakeEngine()})
