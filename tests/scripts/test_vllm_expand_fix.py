"""The vLLM workaround used by the vLLM job (scripts/vllm/vllm_expand_fix.py and its sitecustomize hook).

vLLM itself is not needed: the expansion is checked against its documented meaning, and the
import hook against a stand-in package with vLLM's module path.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import torch

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts" / "vllm"


def load_fix():
    spec = importlib.util.spec_from_file_location("vllm_expand_fix", SCRIPTS / "vllm_expand_fix.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_expansion_repeats_each_requests_value_in_its_own_dtype() -> None:
    fix = load_fix()
    # vLLM's docstring example: x = [a, b, c], cu_num_tokens = [2, 5, 6] -> [a, a, b, b, b, c]
    temps = torch.tensor([0.7, 1.0, 0.0], dtype=torch.float32)
    out = fix.expand_batch_to_tokens(temps, torch.tensor([2, 5, 6]), 6, replace_from=0, replace_to=1)
    assert out.dtype == torch.float32  # the shipped CPU shim truncated floats to int64 (0.7 -> 0)
    assert out.tolist() == torch.tensor([0.7, 0.7, 1.0, 1.0, 1.0, 1.0]).tolist()
    top_k = fix.expand_batch_to_tokens(torch.tensor([5, 0], dtype=torch.int32), torch.tensor([1, 4]), 4)
    assert top_k.dtype == torch.int32 and top_k.tolist() == [5, 0, 0, 0]


def test_sitecustomize_patches_the_rejection_sampler_when_it_is_imported(tmp_path: Path) -> None:
    pkg = tmp_path / "vllm" / "v1" / "sample"
    pkg.mkdir(parents=True)
    for folder in (tmp_path / "vllm", tmp_path / "vllm" / "v1", pkg):
        (folder / "__init__.py").write_text("")
    (pkg / "rejection_sampler.py").write_text("def expand_batch_to_tokens(*a, **k):\n    return 'shipped'\n")
    code = ("import vllm.v1.sample.rejection_sampler as rs, torch; "
            "print(rs.expand_batch_to_tokens(torch.tensor([3]), torch.tensor([2]), 2).tolist())")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SCRIPTS / "patched"), str(tmp_path)]))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[3, 3]"
    assert "patched vllm.v1.sample.rejection_sampler.expand_batch_to_tokens" in done.stderr
    # without the hook the stand-in keeps its own function
    env["PYTHONPATH"] = str(tmp_path)
    plain = subprocess.run([sys.executable, "-c", code.replace(".tolist()", "")], env=env, capture_output=True,
                           text=True, timeout=120)
    assert plain.stdout.strip() == "shipped"
