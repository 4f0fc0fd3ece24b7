"""The example of docs/how-to/numerics-control.md runs and prints what its comments say (bf16 models, ~1 min)."""

from __future__ import annotations

import re
import textwrap

from docs_support import REPO, run_commented_prints

PAGE = REPO / "docs" / "how-to" / "numerics-control.md"


def test_the_numerics_control_example_prints_what_its_comments_say(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    section = PAGE.read_text().split("## In Python\n", 1)[1]
    (block,) = re.findall(r"```python\n(.*?)^\s*```", section, flags=re.S | re.M)
    block = textwrap.dedent(block)
    expected, printed = run_commented_prints(block, PAGE)
    assert len(expected) == 4
    assert printed == expected
