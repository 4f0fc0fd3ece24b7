"""The GPU kernel check runs on the CPU as a dry run, through check.sh, and writes its report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_kernel_check_dry_run_on_cpu(tmp_path: Path) -> None:
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable}
    proc = subprocess.run(
        ["bash", str(REPO / "benchmarks/gpu/check.sh"), "kernels", "--device", "cpu", "--scale", "0.03",
         "--max-vocab", "20000", "--only", "reference-padded", "reference-tree", "bonus-from-draft", "padding-as-index"],
        capture_output=True, text=True, timeout=600, cwd=REPO, env=env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "kernel-check.json").read_text())
    assert report["device"] == "cpu" and len(report["rows"]) == 4
    by = {r["kernel"]: r for r in report["rows"]}
    assert by["reference-padded"]["verdict"] == "equivalent" and by["padding-as-index"]["verdict"] == "shifted"
    assert all(r["as_expected"] for r in report["rows"])
    assert "| bonus-from-draft | shifted |" in (tmp_path / "kernel-check.md").read_text()
    assert "kernel_check.py exit code 0" in (tmp_path / "kernel-check.log").read_text()
