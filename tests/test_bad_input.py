"""Bad input at the run level: each mistake gets a specific error naming what is wrong.

(The cases-file parser's 30+ kinds are in tests/core/test_cases.py, engine output in
tests/engines, server faults in tests/engines/test_openai.py.)
"""

from __future__ import annotations

import pytest
from fake_engines import FakeEngine

from speceq.core.params import SamplingParams
from speceq.errors import ConfigError
from speceq.inputs.cases import Case
from speceq.oracles.build import check_oracle_matches
from speceq.pipeline.config import RunConfig
from speceq.pipeline.runner import run


def cases(**kw) -> list[Case]:
    return [Case(case_id="c", prompt_ids=(256, 100), params=SamplingParams(max_new_tokens=2), **kw)]


class OtherVocab(FakeEngine):
    vocab_size = 300


class OtherEos(FakeEngine):
    eos_token_id = 5


@pytest.mark.parametrize("engine_cls, field", [(OtherVocab, "vocab_size"), (OtherEos, "eos_token_id")])
def test_engines_with_different_vocabularies_are_refused(tmp_path, engine_cls, field) -> None:
    config = RunConfig(samples=50, out_dir=tmp_path, progress=False, oracle=False)
    with pytest.raises(ConfigError, match=f"engines.{field}.*cannot be compared"):
        run(config, cases(), engines={"baseline": FakeEngine(), "candidate": engine_cls()})
    assert not (tmp_path / "chunks").exists()  # refused before sampling anything


def test_too_few_samples_says_how_many_are_needed(tmp_path) -> None:
    config = RunConfig(samples=5, out_dir=tmp_path, progress=False, oracle=False)
    with pytest.raises(ConfigError, match=r"run.samples: 5 samples per engine is too few.*needs about \d+"):
        run(config, cases(), engines={"baseline": FakeEngine(), "candidate": FakeEngine()})
    with pytest.raises(ConfigError, match=r"case 'c'.samples"):
        run(RunConfig(samples=50, out_dir=tmp_path, progress=False, oracle=False), cases(samples=3),
            engines={"baseline": FakeEngine(), "candidate": FakeEngine()})


def test_oracle_of_another_vocabulary_is_refused() -> None:
    class Oracle:
        vocab_size = 512

    with pytest.raises(ConfigError, match="oracle.model: .*vocabulary of 512.*not the baseline's target"):
        check_oracle_matches(Oracle(), {"baseline": FakeEngine(), "candidate": FakeEngine()})


# ---- a plain-function engine plugged in by its spec -------------------------------------------------
PLAIN_ENGINE = '''
import numpy as np

def good(prompt_ids, n, params, seed):
    rng = np.random.default_rng(seed)
    return np.stack([rng.integers(97, 100, size=params["max_new_tokens"]) for _ in range(n)])

def runs_on(prompt_ids, n, params, seed):
    rows = good(prompt_ids, n, params, seed).tolist()
    rows[1] = [97, 257, 98]  # sample 1 of every prompt: EOS (257) at position 1, then two more tokens
    return rows

def three_args(prompt_ids, n, params):
    return []
'''


def test_plain_function_output_errors_name_the_spec_eos_prompt_sample_and_position(tmp_path) -> None:
    from speceq.errors import EngineError

    path = tmp_path / "my_engine.py"
    path.write_text(PLAIN_ENGINE)
    config = RunConfig(baseline=f"{path}:good", candidate=f"{path}:runs_on", samples=20, chunk_size=20,
                       out_dir=tmp_path / "out", progress=False, oracle=False)
    two_prompts = [Case(case_id="c", prompt_ids=(256, 100), companions=((256, 101, 102),),
                        params=SamplingParams(max_new_tokens=3))]
    with pytest.raises(EngineError) as info:
        run(config, two_prompts)
    message = str(info.value)
    assert message.startswith(f"engine '{path}:runs_on', case 'c': ")
    assert "row 2 (prompt 0, sample 1) continues after the EOS id 257 at position 1: it goes on to position 2" in message
    assert (tmp_path / "out" / "chunks" / "baseline").is_dir()  # the baseline's chunk was kept


def test_plain_function_with_three_parameters_is_refused_with_the_expected_signature(tmp_path) -> None:
    path = tmp_path / "my_engine.py"
    path.write_text(PLAIN_ENGINE)
    config = RunConfig(baseline=f"{path}:good", candidate=f"{path}:three_args", out_dir=tmp_path / "out",
                       progress=False, oracle=False)
    with pytest.raises(ConfigError, match=r"expected the signature fn\(prompt_ids, n, params, seed\) .* got 3 required "
                                          r"positional parameter\(s\) \(prompt_ids, n, params\)"):
        run(config, cases(), engines=None)
