"""The example of docs/how-to/test-your-engine.md#sampling-fields-with-the-transformers-engines runs and prints what it says."""

from __future__ import annotations

import contextlib
import io
import re
import textwrap

from docs_support import REPO

PAGE = REPO / "docs" / "how-to" / "test-your-engine.md"


def section_block() -> str:
    text = PAGE.read_text()
    section = text.split("## Sampling fields with the transformers engines", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)^\s*```", section, flags=re.S | re.M)
    assert len(blocks) == 1, "the section has one Python example"
    return textwrap.dedent(blocks[0])


def test_the_transformers_fields_example_prints_what_its_comments_say(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    block = section_block()
    expected = [m.group(1).strip() for line in block.splitlines()
                if line.lstrip().startswith("print(") and (m := re.search(r"\)\s*#\s*(.+)$", line))]
    assert len(expected) == 3
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, str(PAGE), "exec"), {})
    assert out.getvalue().split("\n")[: len(expected)] == expected
