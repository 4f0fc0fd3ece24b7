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


def case(cid: str, verdict: str, tests: list[tuple[str, float]], hard: bool = False) -> dict:
    """A case whose primary tests are ``(name, Holm-adjusted p)``; p = adjusted p."""
    return {"case_id": cid, "verdict": verdict, "notes": [], "hard_failures": ["token outside top-p"] if hard else [],
            "tests": [{"name": n, "pvalue": p, "adjusted_pvalue": p, "primary": True} for n, p in tests]}


def compare_cases(tmp_path: Path, ref: dict, srv: dict, *extra: str) -> subprocess.CompletedProcess:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"alpha": 1e-3, "cases": [ref]}))
    b.write_text(json.dumps({"alpha": 1e-3, "cases": [srv]}))
    return subprocess.run([sys.executable, str(SCRIPT), str(a), str(b), *extra], capture_output=True, text=True)


def test_top_k_subset_does_not_compare_a_case_decided_by_a_test_the_server_cannot_run(tmp_path) -> None:
    """SmolLM2 with a top-20 server oracle: the log-likelihood comparison decides under the transformers
    oracle and is not run under the server's; that is not a disagreement of the oracles."""
    ref = case("t1", "shifted", [("log-likelihood comparison", 2e-5), ("PIT comparison", 0.4)])
    srv = case("t1", "inconclusive", [("PIT comparison", 0.3)])
    out = compare_cases(tmp_path, ref, srv, "--server-subset")
    assert out.returncode == 0, out.stdout
    assert "~~ t1" in out.stdout and "decided by the log-likelihood comparison" in out.stdout
    assert compare_cases(tmp_path, ref, srv).returncode == 1  # a whole-vocabulary server oracle runs every test


def test_top_k_subset_still_fails_a_disagreement_on_a_test_both_oracles_ran(tmp_path) -> None:
    ref = case("t1", "shifted", [("log-likelihood comparison", 0.5), ("PIT comparison", 2e-5)])
    srv = case("t1", "inconclusive", [("PIT comparison", 0.3)])
    out = compare_cases(tmp_path, ref, srv, "--server-subset")
    assert out.returncode == 1 and "!! t1" in out.stdout
    # a hard failure (the support test runs under both) and a server-only shift are compared too
    hard = case("t1", "shifted", [("log-likelihood comparison", 2e-5)], hard=True)
    assert compare_cases(tmp_path, hard, srv, "--server-subset").returncode == 1
    srv_shifted = case("t1", "shifted", [("PIT comparison", 2e-5)])
    assert compare_cases(tmp_path, case("t1", "inconclusive", [("PIT comparison", 0.2)]), srv_shifted,
                         "--server-subset").returncode == 1


def test_the_server_oracles_notes_are_worded_from_their_records(tmp_path) -> None:
    a, b = result(tmp_path / "a.json", {"x": "equivalent"}), result(tmp_path / "b.json", {"x": "equivalent"})
    saved = json.loads(b.read_text())
    saved["cases"][0]["notes"] = [{"kind": "top-k oracle", "values": {}, "example": None, "text": ""},
                                  "an older result's oracle note, a sentence"]
    b.write_text(json.dumps(saved))
    out = subprocess.run([sys.executable, str(SCRIPT), str(a), str(b)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "server oracle note: the oracle knows only the top-K of each law" in out.stdout
    assert "server oracle note: an older result's oracle note, a sentence" in out.stdout
