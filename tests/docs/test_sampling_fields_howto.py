"""The example of docs/how-to/test-your-engine.md#sampling-fields-beyond-temperature runs and prints what it says."""

from __future__ import annotations

import re
import textwrap

from docs_support import REPO, run_commented_prints

PAGE = REPO / "docs" / "how-to" / "test-your-engine.md"


def section_block() -> str:
    text = PAGE.read_text()
    section = text.split("## Sampling fields beyond temperature", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)^\s*```", section, flags=re.S | re.M)
    assert len(blocks) == 1, "the section has one Python example"
    return textwrap.dedent(blocks[0])


def test_the_sampling_fields_example_prints_what_its_comments_say(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    block = section_block()
    expected, printed = run_commented_prints(block, PAGE)
    assert len(expected) == 4
    assert printed == expected
