"""Bad input at the run level: each mistake gets a specific error naming what is wrong.

(The cases-file parser's 30+ kinds are in tests/test_cases.py, engine output in
tests/engines, server faults in tests/engines/test_openai.py.)
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_engines import FakeEngine  # noqa: E402

from speceq.cases import Case  # noqa: E402
from speceq.errors import ConfigError  # noqa: E402
from speceq.params import SamplingParams  # noqa: E402
from speceq.run import RunConfig, check_oracle_matches, run  # noqa: E402


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
