"""End to end on the bundled models (small budgets): the reference engine is not shifted, a
candidate with a wrong temperature is, through the oracle tests, with the evidence printed.

Runs in a subprocess: torch stays out of this process (an in-process run would drop the
modules it imports first, and a heap holding torch makes every later gc.collect() slow).
"""

from __future__ import annotations

import pytest

HOT_ENGINE = '''
import dataclasses
from speceq.engines.baseline import BaselineEngine

class HotEngine(BaselineEngine):
    """Samples the target at 1.5 x the requested temperature (a deliberate bug)."""

    def process(self, logits, params):
        return super().process(logits, dataclasses.replace(params, temperature=params.temperature * 1.5))
'''
TESTS = '''
CASE = {"id": "def-T1", "prompt": "def ", "temperature": 1.0, "max_new_tokens": 4, "batch_size": 64}

def test_reference(speceq):
    result = speceq.check(CASE, inconclusive="pass")
    print("REFERENCE", result.verdict, result.acceptance_rate is not None)

def test_hot(speceq):
    speceq.check(CASE, candidate="hot_engine:HotEngine", candidate_options={"name": "hot"})
'''


def test_reference_passes_and_a_wrong_temperature_is_caught(project: pytest.Pytester) -> None:
    project.makepyfile(hot_engine=HOT_ENGINE, test_bundled=TESTS)
    result = project.runpytest_subprocess("--speceq-samples=300", "-s")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "REFERENCE equivalent True" in out or "REFERENCE inconclusive True" in out
    result.stdout.fnmatch_lines([
        "E *DistributionMismatch: speceq: candidate 'hot' vs baseline 'baseline': run verdict SHIFTED*",
        "E *rejecting tests (Holm-adjusted p <= alpha=0.001):",
    ])
    evidence = out[out.index("rejecting tests"):]
    assert "PIT Anderson-Darling" in evidence or "z temperature drift" in evidence
