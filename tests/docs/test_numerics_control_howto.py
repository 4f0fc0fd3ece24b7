"""The example of docs/how-to/numerics-control.md runs and prints what its comments say (bf16 models, ~1 min)."""

from __future__ import annotations

import contextlib
import io
import re
import textwrap

from docs_support import REPO

PAGE = REPO / "docs" / "how-to" / "numerics-control.md"


def test_the_numerics_control_example_prints_what_its_comments_say(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    section = PAGE.read_text().split("## In Python\n", 1)[1]
    (block,) = re.findall(r"```python\n(.*?)^\s*```", section, flags=re.S | re.M)
    block = textwrap.dedent(block)
    expected = [m.group(1).strip() for line in block.splitlines()
                if line.lstrip().startswith("print(") and (m := re.search(r"\)\s*#\s*(.+)$", line))]
    assert len(expected) == 3
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, str(PAGE), "exec"), {})
    assert out.getvalue().split("\n")[: len(expected)] == expected
