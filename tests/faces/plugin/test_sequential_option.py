"""--speceq-sequential: the fixture runs its checks in the sequential mode and says so."""

from __future__ import annotations

import pytest
from plugin_support import TOY

TEST = """
def test_check(speceq):
    result = speceq.check(speceq.case(id="c", prompt_ids=[1, 2], max_new_tokens=3))
    print("VERDICT", result.verdict, result.n_baseline)
"""


def test_sequential_option_stops_a_shifted_engine_early_and_says_so(project: pytest.Pytester) -> None:
    project.makepyfile(test_seq=TEST)
    result = project.runpytest(*TOY[:1], "--speceq-candidate=toy_engines:shifted_engine", TOY[2],
                               "--speceq-samples=3000", "--speceq-sequential=on", "-rP")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "speceq: *sequential=on (anytime-valid: cases stop once decided)*",
        "*SHIFTED — sequential: decided at n = * samples per engine after * looks;*",
    ])


def test_sequential_header_is_absent_by_default(project: pytest.Pytester) -> None:
    project.makepyfile(test_seq="def test_nothing():\n    pass\n")
    result = project.runpytest(*TOY)
    result.assert_outcomes(passed=1)
    assert "sequential=on" not in result.stdout.str()
