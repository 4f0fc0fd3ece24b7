"""The Python examples of docs/explanation/statistics.md run and print what their comments say."""

from __future__ import annotations

import re
import textwrap

import pytest
from docs_support import REPO, run_commented_prints

PAGE = REPO / "docs" / "explanation" / "statistics.md"
BLOCKS = [textwrap.dedent(b) for b in re.findall(r"```python\n(.*?)^\s*```", PAGE.read_text(), flags=re.S | re.M)]


def test_the_page_has_its_examples() -> None:
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_each_example_prints_what_its_comments_say(block: str) -> None:
    expected, printed = run_commented_prints(block, PAGE)
    assert expected, "an example must say what it prints"
    assert printed == expected
