"""Checks of one pytest session share their stored samples (pipeline/sharing.py): identical chunks are drawn once."""

from __future__ import annotations

import json

import pytest
from plugin_support import TOY

ARGS = (*TOY, "--speceq-tolerance=0.2", "--speceq-samples=1000", "--speceq-store=samples", "--speceq-inconclusive=pass")

TWO_CANDIDATES = """
def test_a(speceq):
    speceq.run(speceq.case(id="c", prompt_ids=[1, 2], max_new_tokens=3))

def test_b(speceq):
    speceq.run(speceq.case(id="c", prompt_ids=[1, 2], max_new_tokens=3), candidate="toy_engines:unseeded_engine")

def test_c(speceq):  # same case id, other parameters: its own samples, never mixed with test_a's
    speceq.run(speceq.case(id="c", prompt_ids=[1, 2], max_new_tokens=3, temperature=0.5))
"""


def _sampled(project: pytest.Pytester, test: str) -> dict:
    (provenance,) = (project.path / "samples").glob(f"*{test}*/check1-*/provenance.json")
    return json.loads(provenance.read_text())["chunks"]


def test_a_second_check_with_the_same_baseline_samples_no_baseline_chunk(project: pytest.Pytester) -> None:
    project.makepyfile(test_share=TWO_CANDIDATES)
    project.runpytest(*ARGS).assert_outcomes(passed=3)
    first, second, other = (_sampled(project, t) for t in ("test_a", "test_b", "test_c"))
    assert first["sampled"] == first["total"] == 4  # 2 slices of 500 per engine
    assert second["total"] == 4 and second["reused"] == 2 and second["sampled"] == 2  # the candidate's only
    assert other["sampled"] == other["total"] == 4
    baseline = sorted((project.path / "samples" / "shared" / "baseline").iterdir())
    assert len(baseline) == 2 and [len(list(f.glob("slice-*.npz"))) for f in baseline] == [2, 2]


def test_a_rerun_reuses_every_shared_chunk(project: pytest.Pytester) -> None:
    project.makepyfile(test_share=TWO_CANDIDATES)
    project.runpytest(*ARGS).assert_outcomes(passed=3)
    project.runpytest(*ARGS).assert_outcomes(passed=3)
    assert all(_sampled(project, t)["sampled"] == 0 for t in ("test_a", "test_b", "test_c"))
