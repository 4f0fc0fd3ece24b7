"""``--certificate pit-law`` end to end on the bundled models: it decides what the TV bound cannot at
700 samples, keeps detecting a planted bug, reuses the stored samples, and refuses what it cannot do."""

from __future__ import annotations

from pathlib import Path

import pytest

from speceq.core.params import SamplingParams
from speceq.errors import ConfigError
from speceq.inputs.cases import Case
from speceq.models.tokenizer import ByteTokenizer
from speceq.pipeline.config import RunConfig
from speceq.pipeline.runner import run
from speceq.verdicts.reasons import note_lines

CASES = [Case(case_id="def-b64", prompt_ids=tuple(ByteTokenizer().encode("def ")),
              params=SamplingParams(max_new_tokens=3), batch_size=64)]


def _run(tmp_path: Path, candidate: str, certificate: str):
    config = RunConfig(candidate=candidate, samples=700, certificate=certificate, out_dir=tmp_path / candidate,
                       progress=False, workers=1)
    return run(config, CASES).cases[0]


def test_pit_law_certifies_the_reference_engine_and_keeps_the_tv_claim_apart(tmp_path: Path) -> None:
    tv = _run(tmp_path, "reference", "tv")  # measured: TV bound 0.23, PIT-law bound 0.12 at 700 samples
    assert tv.verdict == "inconclusive" and "the coarser PIT-law bound is" in tv.reason
    pit = _run(tmp_path, "reference", "pit-law")  # the same stored samples, decided under the other certificate
    assert pit.verdict == "equivalent"
    assert "PIT-law upper bound" in pit.reason and "does not bound the TV between the token laws" in pit.reason
    assert any(note.startswith("PIT-law bound") for note in note_lines(pit.notes))
    # the certificate and the bound that decided are data of the result, for every face (#47 item 3)
    assert tv.certificate == "tv" and tv.decisive_bound == tv.tv_upper_bound
    assert pit.certificate == "pit-law" and pit.pit_law_upper_bound is not None
    assert pit.decisive_bound == pit.pit_law_upper_bound < pit.tolerance <= pit.tv_upper_bound


def test_pit_law_still_detects_a_planted_bug(tmp_path: Path) -> None:
    assert _run(tmp_path, "mutant:greedy-acceptance", "pit-law").verdict == "shifted"


@pytest.mark.parametrize("kwargs, message", [({"oracle": False}, "without the oracle"),
                                             ({"sequential": True}, "sequential run")])
def test_pit_law_needs_the_oracle_and_a_fixed_size_run(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=f"run.certificate: .*{message}"):
        RunConfig(certificate="pit-law", **kwargs)
    with pytest.raises(ConfigError, match="one of tv, pit-law"):
        RunConfig(certificate="kl")


def test_an_inconclusive_case_says_how_long_its_required_samples_would_take() -> None:
    from speceq.verdicts.reasons import sampling_time_estimate

    speeds = dict(prompts=2, candidate_tokens=2000, baseline_tokens_per_s=100.0, candidate_tokens_per_s=25.0)
    # 2 prompts: rows = 2 x samples; 1000 rows now, 2 tokens each; 4000 more rows x 2 tokens x (1/100 + 1/25) s = 400 s
    text = sampling_time_estimate(2500, 500, **speeds)
    assert text is not None and "2500 samples per engine need about 7 min more sampling" in text
    assert sampling_time_estimate(400, 500, **speeds) is None  # enough already
    no_speed = {**speeds, "baseline_tokens_per_s": None, "candidate_tokens_per_s": None}
    assert sampling_time_estimate(2500, 500, **no_speed) is None


def test_the_estimate_is_in_the_notes_of_an_inconclusive_run(tmp_path: Path) -> None:
    tv = _run(tmp_path, "reference", "tv")
    assert tv.verdict == "inconclusive"
    assert any(n.startswith("at this run's sampling speed") and f"{tv.required_n} samples per engine" in n
               for n in note_lines(tv.notes))
