"""docs/how-to/test-a-kernel.md: its example is the file it names, the wrapper is short, and it runs as documented."""

from __future__ import annotations

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
