"""The example of docs/reference/cli.md that reads a saved result.json runs on the shipped example result."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import textwrap
from pathlib import Path

from docs_support import REPO

PAGE = REPO / "docs" / "reference" / "cli.md"
BLOCKS = [textwrap.dedent(b) for b in re.findall(r"```python\n(.*?)^\s*```", PAGE.read_text(), flags=re.S | re.M)]


def test_the_saved_result_example_prints_each_tests_kind_effect_and_the_dataframe(tmp_path: Path) -> None:
    (block,) = [b for b in BLOCKS if "RunResult.from_json" in b and "to_dataframe" in b]
    shutil.copy(REPO / "examples" / "result-example.json", tmp_path / "result.json")
    out, names = io.StringIO(), {}
    cwd = Path.cwd()
    os.chdir(tmp_path)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(block, str(PAGE), "exec"), names)
    finally:
        os.chdir(cwd)
    frame = names["frame"]
    assert {"kind", "effect", "effect_estimate", "effect_low", "effect_high", "effect_level", "effect_unit"} <= set(
        frame.columns)
    assert set(frame["case_id"]) == {c.case_id for c in names["saved"].cases}
    assert "effect_unit" in out.getvalue()  # the frame was printed
    assert "haiku/T=1 note: mixture weight of the draft in the candidate: 0 (known" in out.getvalue()  # a note
