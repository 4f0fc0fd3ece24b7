"""benchmarks/report_gallery.py: its report check finds the picture of each shifted case's deciding
test, and says MISSING when there is none; one mutant end to end (slow)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from benchmark_scripts import load_script

from speceq.reports import render_report
from speceq.verdicts.result import RunResult

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "reports" / "data"


def _gallery():  # noqa: ANN202
    return load_script("report_gallery")


def test_check_report_sees_the_picture_and_its_absence() -> None:
    gallery = _gallery()
    result = RunResult.from_json((DATA / "result-mutant-resample-from-target.json").read_text(encoding="utf-8"))
    [(case_id, verdict, what)] = gallery.check_report(render_report(result))
    assert (case_id, verdict) == ("resample-from-target", "shifted")
    assert what == "z draft drift: picture 'z draft drift: running sum against its null band'"
    no_path = replace(result, cases=(replace(result.cases[0], z_paths=()),))
    [(_, _, what)] = gallery.check_report(render_report(no_path))
    assert what == "MISSING: z draft drift has no picture"
    equivalent = RunResult.from_json((DATA / "result-reference-equivalent.json").read_text(encoding="utf-8"))
    assert [w for _, _, w in gallery.check_report(render_report(equivalent))] == ["—", "—"]


@pytest.mark.slow
def test_one_mutant_end_to_end(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "report_gallery.py"), "--samples", "300",
                           "--mutants", "bonus-from-draft", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=900, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "bonus-from-draft" in proc.stdout and "0 shifted case(s) without a picture" in proc.stdout
    result = json.loads((tmp_path / "bonus-from-draft.json").read_text())
    assert result["cases"][0]["verdict"] == "shifted" and (tmp_path / "bonus-from-draft.html").is_file()
