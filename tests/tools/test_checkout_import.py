"""tools.checkout_import maps ``speceq`` onto ``harness/`` where nothing is installed (the GPU and vLLM scripts)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("prefer_installed", [True, False])
def test_bare_interpreter_imports_speceq_from_the_checkout(prefer_installed: bool) -> None:
    import site

    paths = [p for p in (*site.getsitepackages(), site.getusersitepackages()) if Path(p).is_dir()]
    env = {"PYTHONPATH": ":".join(paths), "PATH": "/usr/bin:/bin"}
    # -S: no site processing, so an editable install's .pth hook is not applied
    probe = subprocess.run([sys.executable, "-S", "-c", "import speceq"], capture_output=True, text=True, env=env,
                           timeout=120, cwd="/")
    if probe.returncode == 0 and prefer_installed:
        pytest.skip("speceq is importable without site processing here (a regular install)")
    code = (f"import sys; sys.path.insert(0, {str(REPO)!r}); "
            "from tools.checkout_import import import_speceq_from_checkout; "
            f"import_speceq_from_checkout(prefer_installed={prefer_installed}); "
            "import speceq.kernels, speceq.stats; print(speceq.__file__)")
    proc = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, env=env, timeout=300, cwd="/")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert Path(proc.stdout.strip()) == REPO / "harness" / "__init__.py"
