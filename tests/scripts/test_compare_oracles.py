"""scripts/vllm/compare_oracles.py: the vLLM job's check that both oracles give the same verdicts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "vllm" / "compare_oracles.py"


def result(path: Path, verdicts: dict[str, str]) -> Path:
    cases = [{"case_id": cid, "verdict": v, "notes": [],
              "tests": [{"name": "PIT Anderson-Darling", "pvalue": 0.5}]} for cid, v in verdicts.items()]
    path.write_text(json.dumps({"cases": cases}))
    return path


def compare(tmp_path: Path, ref: dict[str, str], srv: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    a, b = result(tmp_path / "a.json", ref), result(tmp_path / "b.json", srv)
    return subprocess.run([sys.executable, str(SCRIPT), str(a), str(b), *extra], capture_output=True, text=True)


def test_same_shifted_cases_pass_even_when_other_verdicts_differ(tmp_path) -> None:
    out = compare(tmp_path, {"x": "shifted", "y": "equivalent"}, {"x": "shifted", "y": "inconclusive"})
    assert out.returncode == 0, out.stdout
    assert "oracles agree" in out.stdout and "PIT Anderson-Darling: 0.5 / 0.5" in out.stdout


def test_a_case_shifted_under_one_oracle_only_fails(tmp_path) -> None:
    out = compare(tmp_path, {"x": "shifted", "y": "equivalent"}, {"x": "inconclusive", "y": "equivalent"})
    assert out.returncode == 1 and "!! x" in out.stdout


def test_a_shifted_aa_run_fails_even_when_both_agree(tmp_path) -> None:
    out = compare(tmp_path, {"x": "shifted"}, {"x": "shifted"}, "--not-shifted")
    assert out.returncode == 1
    assert compare(tmp_path, {"x": "equivalent"}, {"x": "inconclusive"}, "--not-shifted").returncode == 0


def test_a_missing_case_fails(tmp_path) -> None:
    assert compare(tmp_path, {"x": "equivalent", "y": "equivalent"}, {"x": "equivalent"}).returncode == 1


def test_server_subset_compares_only_the_cases_the_server_scored(tmp_path) -> None:
    """A top-K server oracle scores only plain temperature-1 cases (the SmolLM2 part of the job)."""
    ref = {"t1": "shifted", "t07": "shifted"}
    out = compare(tmp_path, ref, {"t1": "shifted"}, "--server-subset")
    assert out.returncode == 0 and "(not scored)" in out.stdout
    assert compare(tmp_path, ref, {"t1": "inconclusive"}, "--server-subset").returncode == 1
    assert compare(tmp_path, ref, {"t1": "shifted"}, "--server-subset", "--not-shifted").returncode == 1
    assert compare(tmp_path, ref, {"t1": "shifted"}, "--bogus").returncode == 2
