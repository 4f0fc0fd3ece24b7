"""docs/how-to/audit-an-engine.md: its command runs (at a smaller budget) and prints what the page shows."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs/how-to/audit-an-engine.md"


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)


def test_the_page_command_runs_as_documented(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from speceq.faces.cli import main

    command = [b.strip() for b in _blocks("sh") if b.startswith("speceq audit")][0]  # the page's first example
    argv = shlex.split(command)[1:]
    out = tmp_path / "speceq-audit"
    argv[argv.index("--samples") + 1] = "20"  # the page's 200, cut to keep the test short (about 15 s of CPU)
    argv[argv.index("--out") + 1] = str(out)
    code = main(argv)
    printed = capsys.readouterr().out
    shown = next(b for b in _blocks("text") if "| method |" in b)
    header = [line for line in shown.splitlines() if line.startswith("| method |")]
    assert header and header[0] in printed.splitlines()
    audit = json.loads((out / "audit.json").read_text())
    assert code in (0, 3) and audit["verdict"] in ("equivalent", "inconclusive")  # lossless paths
    words = {(c["method"], c["setting"], c["shape"]): c for c in audit["cells"]}
    assert {k for k, c in words.items() if c["status"] == "not supported"} == \
        {(m, s, "ragged-b4") for m in ("hf-assisted", "hf-prompt-lookup") for s in ("t1", "greedy")}
    # the page's sharing claim: the second method samples no baseline chunk
    assert [c["baseline_chunks_sampled"] for c in audit["cells"] if c["shape"] == "single"] == [1, 1, 0, 0]
    # the page's reproducing command is the one the audit writes (with the page's folder and budget)
    cell = words[("hf-assisted", "t1", "single")]["command"]
    documented = next(b.strip() for b in _blocks("text") if b.startswith("speceq run"))
    assert cell.replace(str(out), "speceq-audit").replace("--samples 20", "--samples 200") == documented


def test_the_request_field_settings_command_runs_every_cell(tmp_path: Path) -> None:
    """The page's request-field example: every cell runs (no field refused), in the hf order, never shifted."""
    from speceq.faces.cli import main

    (command,) = [b.strip() for b in _blocks("sh") if b.startswith("speceq audit") and "minp01" in b]
    argv = shlex.split(command)[1:]
    out = tmp_path / "fields"
    argv[argv.index("--samples") + 1] = "20"
    argv[argv.index("--out") + 1] = str(out)
    code = main(argv)
    audit = json.loads((out / "audit.json").read_text())
    assert code in (0, 3) and len(audit["cells"]) == 6
    assert all(c["status"] == "ran" and c["verdict"] in ("equivalent", "inconclusive") for c in audit["cells"])


def test_the_regex_setting_command_runs_and_refuses_hf_universal(tmp_path: Path) -> None:
    """The page's structured-output example: hf-assisted's cell runs in the hf order with the byte tokenizer, never
    shifted; hf-universal's is not supported, with the reason the page quotes."""
    pytest.importorskip("llguidance", reason="the regex setting needs the 'structured' extra (llguidance)")
    from speceq.faces.cli import main

    (command,) = [b.strip() for b in _blocks("sh") if b.startswith("speceq audit") and "regex" in b]
    argv = shlex.split(command)[1:]
    out = tmp_path / "regex"
    argv[argv.index("--samples") + 1] = "20"
    argv[argv.index("--out") + 1] = str(out)
    code = main(argv)
    audit = json.loads((out / "audit.json").read_text())
    cells = {c["method"]: c for c in audit["cells"]}
    assert code in (0, 3) and set(cells) == {"hf-assisted", "hf-universal"}
    assert cells["hf-assisted"]["status"] == "ran" and cells["hf-assisted"]["verdict"] in ("equivalent", "inconclusive")
    assert cells["hf-universal"]["status"] == "not supported"
    quoted = re.search(r'`not supported`: "(.*?) \.\.\.', " ".join(PAGE.read_text(encoding="utf-8").split())).group(1)
    assert cells["hf-universal"]["reason"].startswith(quoted)
    case = json.loads((out / "cases" / "regex-single.json").read_text())
    assert "bytes" in json.dumps(case) and '"processing": "hf"' in json.dumps(case)
