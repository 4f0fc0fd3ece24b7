"""The prepared GPU check runs end to end on the CPU (smoke path) and writes its report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_gpu_check_smoke_on_cpu(tmp_path: Path) -> None:
    out = tmp_path / "report"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks/gpu/check.py"), "--device", "cpu", "--tokens", "2000",
         "--greedy-prompts", "4", "--greedy-len", "8", "--collect-seconds", "10", "--out", str(out)],
        capture_output=True, text=True, timeout=600, cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out / "gpu-check.json").read_text())
    greedy = report["greedy"]
    assert {(r["engine"], r["dtype"], r["batch_size"]) for r in greedy} >= {
        ("baseline", "float32", 1), ("reference", "bfloat16", 32), ("hf-assisted", "float16", 1)
    }
    truth = greedy[0]
    assert (truth["engine"], truth["dtype"], truth["batch_size"]) == ("baseline", "float32", 1)
    assert truth["divergent_rows"] == 0  # the reference run agrees with itself
    for r in greedy:
        assert r["near_ties"] + r["mismatches"] == r["divergent_rows"]
    # float32 speculation at temperature 0 reproduces the float32 argmax path exactly
    assert all(r["mismatches"] == 0 for r in greedy if r["dtype"] == "float32")
    sampling = report["sampling"]
    assert all(v["tokens"] >= 2000 for v in sampling["collection"].values())
    comparisons = {(c["fraction"], c["comparison"]) for c in sampling["comparisons"]}
    assert (1.0, "bf16 speculative vs bf16 plain") in comparisons and (0.1, "bf16 plain vs fp32 plain") in comparisons
    assert all(c["verdict"] in ("equivalent", "shifted", "inconclusive") for c in sampling["comparisons"])
    md = (out / "gpu-check.md").read_text()
    assert "Greedy divergence" in md and "bf16 speculative vs bf16 plain" in md


def test_gpu_check_imports_speceq_from_a_bare_checkout() -> None:
    """On an accelerator machine without ``pip install``, check.py maps ``speceq`` onto ``harness/``."""
    import site

    paths = [p for p in (*site.getsitepackages(), site.getusersitepackages()) if Path(p).is_dir()]
    env = {"PYTHONPATH": ":".join(paths), "PATH": "/usr/bin:/bin"}
    # -S: no site processing, so an editable install's .pth hook is not applied
    probe = subprocess.run([sys.executable, "-S", "-c", "import speceq"], capture_output=True, text=True, env=env,
                           timeout=120, cwd="/")
    if probe.returncode == 0:
        pytest.skip("speceq is importable without site processing here (a regular install); the shim is not needed")
    code = (
        f"import runpy; runpy.run_path({str(REPO / 'benchmarks/gpu/check.py')!r}); "
        "import speceq, speceq.pipeline.analysis, speceq.oracles.hf; print(speceq.__file__)")
    proc = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, env=env, timeout=300, cwd="/")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert Path(proc.stdout.strip()) == REPO / "harness" / "__init__.py"
