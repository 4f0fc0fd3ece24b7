"""Safety properties of the code base itself (issue: reliability and safety).

- nothing the project stores or loads goes through pickle (numpy with allow_pickle=False,
  JSON, safetensors);
- model weights load through safetensors only;
- the bundled model folders hold no pickle-format weights.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted([*(ROOT / "harness").rglob("*.py"), *(ROOT / "reports").rglob("*.py")])

FORBIDDEN = {
    r"\bimport pickle\b|\bfrom pickle\b|\bcPickle\b|\bdill\b|\bjoblib\b": "pickle-based serialisation",
    r"allow_pickle\s*=\s*True": "numpy loading with pickle enabled",
    r"\btorch\.load\(": "torch.load (pickle) instead of safetensors",
    r"\bpd\.read_pickle\b|\.to_pickle\(": "pandas pickle I/O",
    r"(?<![\w.])eval\(|(?<![\w.])exec\(": "eval/exec of data",
}


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_pickle_or_eval_in_the_package(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    for pattern, what in FORBIDDEN.items():
        m = re.search(pattern, text)
        assert m is None, f"{path.relative_to(ROOT)}: {what} ({m.group(0)!r})"


def test_every_numpy_load_disables_pickle() -> None:
    for path in SOURCES:
        for line in path.read_text(encoding="utf-8").splitlines():
            if re.search(r"\bnp\.load\(", line) and "``" not in line:  # code, not prose
                assert "allow_pickle=False" in line, f"{path.relative_to(ROOT)}: {line.strip()}"


def test_model_weights_are_safetensors_only() -> None:
    for folder in (ROOT / "harness" / "models" / "target", ROOT / "harness" / "models" / "draft"):
        names = {p.name for p in folder.iterdir()}
        assert "model.safetensors" in names
        assert not {n for n in names if n.endswith((".bin", ".pt", ".pth", ".pkl", ".ckpt"))}
    loader = (ROOT / "harness" / "models" / "__init__.py").read_text(encoding="utf-8")
    assert "use_safetensors=True" in loader


def test_public_api_is_lazy_and_complete() -> None:
    """``import speceq`` imports no torch, and every name in ``__all__`` resolves."""
    import subprocess
    import sys

    code = ("import sys, speceq; assert 'torch' not in sys.modules, 'torch imported';"
            "missing = [n for n in speceq.__all__ if n != '__version__' and n not in speceq._PUBLIC];"
            "assert not missing, missing; [getattr(speceq, n) for n in speceq.__all__]; print('ok')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
