"""`speceq kernel`: verdicts as exit codes, spec overrides, JSON and HTML outputs, drafters, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from speceq.faces.cli import main

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples/kernels/my_kernel.py"


def test_equivalent_kernel_exits_0_and_writes_json_and_html(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out_json, out_html = tmp_path / "k.json", tmp_path / "k.html"
    rc = main(["kernel", "reference:padded", "--scale", "0.05", "--max-vocab", "20000", "--json", str(out_json),
               "--report", str(out_html)])
    assert rc == 0
    assert "equivalent" in capsys.readouterr().out
    d = json.loads(out_json.read_text())
    assert d["verdict"] == "equivalent" and d["spec"]["layout"] == "padded" and d["spec"]["max_vocab"] == 20000
    html = out_html.read_text()
    assert "Kernel checks" in html and "reference-padded-standard" in html


def test_a_mutant_exits_1_with_its_diagnosis(capsys: pytest.CaptureFixture) -> None:
    rc = main(["kernel", "mutant:greedy-random-path", "--scale", "0.05", "--max-vocab", "20000"])
    out = capsys.readouterr().out
    assert rc == 1 and "shifted" in out and "greedy row is not the target's argmax path" in out
    assert "pass in a batch of their own" in out


def test_a_user_file_and_a_spec_override(capsys: pytest.CaptureFixture) -> None:
    rc = main(["kernel", f"{EXAMPLE}:my_kernel", "--scale", "0.05", "--max-vocab", "20000", "--max-draft", "2"])
    assert rc == 0 and "my_kernel (padded, standard): equivalent" in capsys.readouterr().out


def test_a_declared_lossy_kernel_exits_1(capsys: pytest.CaptureFixture) -> None:
    rc = main(["kernel", "mutant:residual-from-target", "--lossy", "--scale", "0.1", "--max-vocab", "20000"])
    assert rc == 1 and ": lossy -- declared lossy; largest measured TV" in capsys.readouterr().out


def test_drafter_conformance(capsys: pytest.CaptureFixture) -> None:
    assert main(["kernel", "drafter:conforming", "--drafter"]) == 0
    assert main(["kernel", "drafter:ignores-temperature", "--drafter"]) == 1
    assert "not drawn from the q it returns" in capsys.readouterr().out


def test_drafter_check_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "drafter.json"
    assert main(["kernel", "drafter:conforming", "--drafter", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["verdict"] == "equivalent" and data["exit_code"] == 0 and len(data["tests"]) == 9


@pytest.mark.parametrize("extra", [["--report", "r.html"], ["--tolerance", "0.1"], ["--scale", "2"], ["--no-solo"],
                                   ["--layout", "padded"], ["--lossy"]])
def test_drafter_check_refuses_options_it_cannot_honour(extra: list[str], capsys: pytest.CaptureFixture) -> None:
    assert main(["kernel", "drafter:conforming", "--drafter", *extra]) == 2
    err = capsys.readouterr().err
    assert f"{extra[0]} does not apply to a drafter check" in err and err.count("\n") == 1, err


@pytest.mark.parametrize("argv", [["kernel", "nosuch"], ["kernel", "mutant:nosuch"],
                                  ["kernel", "reference:padded", "--layout", "padded", "--params"],
                                  ["kernel", f"{EXAMPLE}:missing"], ["kernel", "reference", "--alpha", "2"]])
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture) -> None:
    assert main(argv) == 2
    assert "speceq: error:" in capsys.readouterr().err



IGNORES_MIN_P = """
from dataclasses import replace

from speceq.kernels import kernel
from speceq.kernels.reference_kernels import reference_kernel

_ref = reference_kernel("ragged", "standard")


@kernel(layout="ragged", method="standard", params=True, greedy=True)
def ignores_min_p(req):
    return _ref(replace(req, min_p=None))
"""


def test_min_p_flag_sends_min_p_requests(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A kernel that ignores min-p passes until --min-p declares that it applies min-p; then it is caught."""
    path = tmp_path / "ignores_min_p.py"
    path.write_text(IGNORES_MIN_P)
    argv = ["kernel", f"{path}:ignores_min_p", "--scale", "0.1", "--no-solo"]
    assert main(argv) == 0
    assert "min-p" not in capsys.readouterr().out.split("equivalent", 1)[0]
    assert main([*argv, "--min-p"]) == 1
    assert "min-p on" in capsys.readouterr().out
