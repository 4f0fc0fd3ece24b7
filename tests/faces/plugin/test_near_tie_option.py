"""--speceq-near-tie-nats: the greedy near-tie threshold reaches every check of the session."""

from __future__ import annotations

import argparse

import pytest
from plugin_support import TOY

from speceq.core.defaults import NEAR_TIE_NATS
from speceq.faces.plugin import SESSION_KEY
from speceq.faces.pytest_support.options import OPTION_BY_NAME

TEST = """
def test_check(speceq):
    result = speceq.run(speceq.case(id="c", prompt_ids=[1, 2], max_new_tokens=3), samples=20)
    print("NEAR_TIE", result.provenance["settings"]["near_tie_nats"])
"""


def test_default_is_the_run_default_and_command_line_and_ini_set_it(project: pytest.Pytester) -> None:
    s = project.parseconfigure().stash[SESSION_KEY].settings
    assert s.near_tie_nats is None and s.near_tie() == NEAR_TIE_NATS and s.sources["near_tie_nats"] == "default"
    s = project.parseconfigure("--speceq-near-tie-nats=0.02").stash[SESSION_KEY].settings
    assert s.near_tie() == 0.02 and s.sources["near_tie_nats"] == "command line"
    project.makeini("[pytest]\nspeceq_near_tie_nats = 0.01\n")
    s = project.parseconfigure().stash[SESSION_KEY].settings
    assert s.near_tie() == 0.01 and s.sources["near_tie_nats"] == "ini"


@pytest.mark.parametrize("text", ["-1", "nan", "inf", "wide"])
def test_invalid_thresholds_are_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="nats >= 0"):
        OPTION_BY_NAME["near_tie_nats"].convert(text)


def test_the_threshold_reaches_the_run(project: pytest.Pytester) -> None:
    project.makepyfile(test_nt=TEST)
    result = project.runpytest(*TOY, "--speceq-near-tie-nats=0.015", "-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*NEAR_TIE 0.015*"])
