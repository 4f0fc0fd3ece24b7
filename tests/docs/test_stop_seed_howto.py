"""The examples of docs/how-to/test-your-engine.md#stop-strings, #structured-output, #per-case-seeds and
#progress-inside-a-chunk run and print what their comments say."""

from __future__ import annotations

import re
import textwrap

import pytest
from docs_support import REPO, run_commented_prints

PAGE = REPO / "docs" / "how-to" / "test-your-engine.md"


def section_block(title: str) -> str:
    section = PAGE.read_text().split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)^\s*```", section, flags=re.S | re.M)
    assert len(blocks) == 1, f"the section {title!r} has one Python example"
    return textwrap.dedent(blocks[0])


@pytest.mark.parametrize(("title", "prints"), [("Stop strings", 4), ("Structured output", 5),
                                                     ("Per-case seeds", 2), ("Progress inside a chunk", 1)])
def test_the_example_prints_what_its_comments_say(tmp_path, monkeypatch, title: str, prints: int) -> None:
    monkeypatch.chdir(tmp_path)
    block = section_block(title)
    expected, printed = run_commented_prints(block, PAGE)
    assert len(expected) == prints
    assert printed == expected
