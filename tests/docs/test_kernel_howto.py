"""docs/how-to/test-a-kernel.md: its example is the file it names, the wrapper is short, and it runs as documented."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs/how-to/test-a-kernel.md"
EXAMPLE = REPO / "examples/kernels/my_kernel.py"


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_the_page_shows_the_example_file_verbatim() -> None:
    assert EXAMPLE.read_text(encoding="utf-8") in _python_blocks(PAGE.read_text(encoding="utf-8"))


def test_the_wrapper_is_under_twenty_lines() -> None:
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    start = lines.index('@kernel(layout="padded", method="standard")')
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].strip())
    assert end - start < 20


@pytest.mark.parametrize(("attr", "rc", "verdict"), [("my_kernel", 0, "equivalent"),
                                                     ("my_buggy_kernel", 1, "shifted")])
def test_the_documented_commands_give_the_documented_verdicts(attr: str, rc: int, verdict: str,
                                                              capsys: pytest.CaptureFixture) -> None:
    from speceq.faces.cli import main

    # the page's command, at a smaller budget (a tenth of the draws, vocabularies up to 20 000)
    assert main(["kernel", f"{EXAMPLE}:{attr}", "--scale", "0.1", "--max-vocab", "20000", "--no-solo"]) == rc
    out = capsys.readouterr().out
    assert f"(padded, standard): {verdict}" in out
    if verdict == "shifted":
        assert "recovered-token (residual) law wrong" in out


HF_EXAMPLE = REPO / "examples/kernels/hf_signature.py"


def test_the_page_shows_the_transformers_signature_example_verbatim() -> None:
    assert HF_EXAMPLE.read_text(encoding="utf-8") in _python_blocks(PAGE.read_text(encoding="utf-8"))


@pytest.mark.parametrize(("attr", "rc", "verdict"), [("my_kernel", 0, "equivalent"),
                                                     ("my_buggy_kernel", 1, "shifted")])
def test_the_transformers_signature_commands_give_the_documented_verdicts(attr: str, rc: int, verdict: str,
                                                                          capsys: pytest.CaptureFixture) -> None:
    from speceq.faces.cli import main

    text = PAGE.read_text(encoding="utf-8")
    assert f"speceq kernel examples/kernels/hf_signature.py:{attr} " in text
    # the page's command, at a smaller budget (a tenth of the draws, vocabularies up to 20 000)
    assert main(["kernel", f"{HF_EXAMPLE}:{attr}", "--scale", "0.1", "--max-vocab", "20000"]) == rc
    out = capsys.readouterr().out
    assert f"(single, standard): {verdict}" in out
    if verdict == "shifted":
        assert "recovered-token (residual) law wrong" in out


MODEL_EXAMPLES = {"model_level": REPO / "examples/kernels/model_level.py",
                  "own_drafts": REPO / "examples/kernels/own_drafts.py"}


@pytest.mark.parametrize("name", sorted(MODEL_EXAMPLES))
def test_the_page_shows_the_model_layout_examples_verbatim(name: str) -> None:
    assert MODEL_EXAMPLES[name].read_text(encoding="utf-8") in _python_blocks(PAGE.read_text(encoding="utf-8"))


@pytest.mark.parametrize(("name", "attr", "rc", "verdict"), [
    ("model_level", "my_kernel", 0, "equivalent"), ("model_level", "my_buggy_kernel", 1, "shifted"),
    ("own_drafts", "package_step", 0, "equivalent"), ("own_drafts", "package_buggy_step", 1, "shifted")])
def test_the_model_layout_commands_give_the_documented_verdicts(name: str, attr: str, rc: int, verdict: str,
                                                                capsys: pytest.CaptureFixture) -> None:
    from speceq.faces.cli import main

    text = PAGE.read_text(encoding="utf-8")
    assert f"speceq kernel examples/kernels/{name}.py:{attr} " in text
    # the page's command as documented (the model layout's default check takes about a second)
    assert main(["kernel", f"{MODEL_EXAMPLES[name]}:{attr}"]) == rc
    out = capsys.readouterr().out
    assert f"{attr} (model, lossless): {verdict}" in out
    if verdict == "shifted":
        assert "token law after a prefix" in out


def test_the_model_layout_wrappers_are_two_lines() -> None:
    for path in MODEL_EXAMPLES.values():
        lines = path.read_text(encoding="utf-8").splitlines()
        starts = [i for i, line in enumerate(lines) if line.startswith('@kernel(layout="model"')]
        assert len(starts) == 2
        for start in starts:
            end = next((i for i in range(start + 1, len(lines)) if not lines[i].strip()), len(lines))
            assert end - start <= 5, (path.name, start)


LAYOUT_EXAMPLES = {"ragged": REPO / "examples/kernels/ragged.py", "tree": REPO / "examples/kernels/tree.py"}


@pytest.mark.parametrize("layout", sorted(LAYOUT_EXAMPLES))
def test_the_page_shows_the_ragged_and_tree_examples_verbatim(layout: str) -> None:
    assert LAYOUT_EXAMPLES[layout].read_text(encoding="utf-8") in _python_blocks(PAGE.read_text(encoding="utf-8"))


@pytest.mark.parametrize(("layout", "attr", "rc", "verdict", "finding"), [
    ("ragged", "my_kernel", 0, "(ragged, standard): equivalent", ""),
    ("ragged", "my_buggy_kernel", 1, "(ragged, standard): shifted", "token law at the draft positions wrong"),
    ("tree", "my_kernel", 0, "(tree, target-only): equivalent", ""),
    ("tree", "my_buggy_kernel", 1, "(tree, target-only): shifted", "token law at the reached tree nodes wrong")])
def test_the_ragged_and_tree_commands_give_the_documented_verdicts(layout: str, attr: str, rc: int, verdict: str,
                                                                   finding: str,
                                                                   capsys: pytest.CaptureFixture) -> None:
    from speceq.faces.cli import main

    text = PAGE.read_text(encoding="utf-8")
    assert f"speceq kernel examples/kernels/{layout}.py:{attr} " in text
    assert f"kernel {attr} {verdict}" in text  # the page shows this verdict's output
    # the page's command, at a smaller budget (a tenth of the draws, vocabularies up to 20 000)
    assert main(["kernel", f"{LAYOUT_EXAMPLES[layout]}:{attr}", "--scale", "0.1", "--max-vocab", "20000",
                 "--no-solo"]) == rc
    out = capsys.readouterr().out
    assert f"kernel {attr} {verdict}" in out
    assert finding in out


# ---- lines of wrapper per layout: the page's table is counted from the example files ----------------------------
def _definition_lines(path: Path, name: str) -> int:
    """Lines of the top-level definition of ``name`` in ``path``: a function with its decorators, or an assignment."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            return node.end_lineno - first + 1
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.end_lineno - node.lineno + 1
    raise AssertionError(f"{_rel(path)} defines no top-level {name!r}")


def _rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


_WRAPPER_ROW = re.compile(r"^\| `(?P<layout>[\w-]+)` \| `(?P<example>examples/kernels/\w+\.py):(?P<wrapper>\w+)` "
                          r"\| `(?P<kernel>\w+)` \| (?P<kernel_lines>\d+) \| (?P<wrapper_lines>\d+) \|", flags=re.M)


def _wrapper_table() -> list[re.Match]:
    return list(_WRAPPER_ROW.finditer(PAGE.read_text(encoding="utf-8")))


def test_the_wrapper_table_covers_every_layout_and_every_example() -> None:
    rows = _wrapper_table()
    assert {r["layout"] for r in rows} == {"padded", "ragged", "single", "tree", "model"}
    examples = [r["example"] for r in rows]  # one row per example file, each file once
    assert sorted(examples) == sorted(_rel(p) for p in (REPO / "examples/kernels").glob("*.py"))
    assert len(rows) == WRAPPER_ROWS


WRAPPER_ROWS = 6


@pytest.mark.parametrize("row", range(WRAPPER_ROWS))
def test_the_wrapper_table_matches_the_example_files(row: int) -> None:
    r = _wrapper_table()[row]
    path = REPO / r["example"]
    assert int(r["wrapper_lines"]) == _definition_lines(path, r["wrapper"]), r.group(0)
    assert int(r["kernel_lines"]) == _definition_lines(path, r["kernel"]), r.group(0)


def test_the_reference_pages_scenarios_example_runs_as_written() -> None:
    """docs/reference/kernels.md: the example of ``check(kernel, scenarios=...)`` with tree scenarios."""
    page = (REPO / "docs/reference/kernels.md").read_text(encoding="utf-8")
    block = next(b for b in _python_blocks(page) if "default_tree_scenarios" in b)
    exec(compile(block, "docs/reference/kernels.md", "exec"), {})  # its own assert checks the scenarios checked
