"""The Python examples of docs/explanation/statistics.md run and print what their comments say."""

from __future__ import annotations

import contextlib
import io
import re
import textwrap

import pytest
from docs_support import REPO

PAGE = REPO / "docs" / "explanation" / "statistics.md"
BLOCKS = [textwrap.dedent(b) for b in re.findall(r"```python\n(.*?)^\s*```", PAGE.read_text(), flags=re.S | re.M)]


def test_the_page_has_its_examples() -> None:
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_each_example_prints_what_its_comments_say(block: str) -> None:
    expected = [m.group(1).strip() for line in block.splitlines()
                if line.lstrip().startswith("print(") and (m := re.search(r"\)\s*#\s*(.+)$", line))]
    assert expected, "an example must say what it prints"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, str(PAGE), "exec"), {})
    assert out.getvalue().split("\n")[: len(expected)] == expected
