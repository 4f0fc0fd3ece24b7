"""Packaging: a non-editable install holds exactly one top-level package, ``speceq``, and pip's
resolver accepts speceq next to another torch 2.x and another transformers 5.x.

The wheel is built from this checkout once per module (no build isolation, no network). The
install goes into a fresh virtual environment that sees the machine's packages (torch, numpy...)
but gets nothing but speceq itself, so its site-packages shows exactly what speceq installs.
The resolver check uses stand-in wheels of torch/transformers versions other than the installed
ones, built here, with ``--no-index``: pip resolves for real and downloads nothing.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TIMEOUT = 600


def _run(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False)


def _setuptools_version() -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in importlib.metadata.version("setuptools").split(".")[:2])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return (0,)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """speceq's wheel, built from this checkout."""
    out = tmp_path_factory.mktemp("wheel")
    # pyproject.toml's license fields need setuptools >= 77 (PEP 639): use this environment's
    # setuptools when it is recent enough (fast, offline), else let pip build in isolation
    isolation = [] if _setuptools_version() < (77,) else ["--no-build-isolation"]
    proc = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-q", "-w", str(out), str(REPO)])
    assert proc.returncode == 0, proc.stderr
    (whl,) = out.glob("speceq-*.whl")
    return whl


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    """A fresh venv (machine packages visible) with speceq installed from the wheel, not editable."""
    root = tmp_path_factory.mktemp("venv") / "env"
    proc = _run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(root)])
    assert proc.returncode == 0, proc.stderr
    proc = _run([sys.executable, "-m", "pip", "--python", str(root / "bin" / "python"), "install", "-q",
                 "--no-deps", "--no-index", str(wheel)])
    assert proc.returncode == 0, proc.stderr
    return root


def _site_packages(venv: Path) -> Path:
    (site,) = (venv / "lib").glob("python3*/site-packages")
    return site


def test_wheel_installs_one_top_level_package_with_its_data(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/", 1)[0] for n in names}
    assert top == {"speceq", f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}, top
    for data in ("speceq/models/target/model.safetensors", "speceq/models/draft/model.safetensors",
                 "speceq/reports/templates/report.html.j2", "speceq/suites/test_greedy.py", "speceq/py.typed"):
        assert data in names, f"{data} missing from the wheel"
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "speceq = speceq.faces.plugin" in entry_points and "speceq = speceq.faces.cli:main" in entry_points


def test_non_editable_install_holds_only_speceq(venv: Path) -> None:
    entries = sorted(p.name for p in _site_packages(venv).iterdir())
    assert [e for e in entries if not e.endswith(".dist-info")] == ["speceq"], entries
    assert [e for e in entries if e.endswith(".dist-info")] == ["speceq-0.1.0.dist-info"], entries
    python = str(venv / "bin" / "python")
    proc = _run([python, "-c", "import sys, speceq; print(speceq.__file__); print('torch' in sys.modules)"])
    assert proc.returncode == 0, proc.stderr
    where, torch_loaded = proc.stdout.split()
    assert Path(where).is_relative_to(_site_packages(venv)), where
    assert torch_loaded == "False"
    proc = _run([python, "-m", "speceq", "--help"])
    assert proc.returncode == 0 and "run" in proc.stdout, proc.stderr


def test_a_user_project_with_its_own_harness_reports_suites_keeps_them(venv: Path, tmp_path: Path) -> None:
    """The pytest11 entry point loads speceq.faces.plugin, and the user's own same-named packages still win."""
    for name in ("harness", "reports", "suites"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"OWNER = 'user {name}'\n")
    (tmp_path / "harness" / "plugin.py").write_text("OWNER = 'user harness.plugin'\n")
    (tmp_path / "reports" / "__main__.py").write_text("print('user reports main')\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_user.py").write_text(textwrap.dedent("""
        import harness, harness.plugin, reports, suites

        def test_own_modules():
            assert harness.OWNER == "user harness"
            assert harness.plugin.OWNER == "user harness.plugin"
            assert reports.OWNER == "user reports" and suites.OWNER == "user suites"

        def test_speceq_plugin_is_loaded(speceq, request):
            assert request.config.pluginmanager.has_plugin("speceq")
    """))
    python = str(venv / "bin" / "python")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = _run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout, proc.stdout
    proc = _run([python, "-m", "reports"], cwd=tmp_path, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "user reports main", proc.stdout + proc.stderr


def _stand_in_wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> None:
    """A metadata-only wheel: enough for pip's resolver, never installed."""
    dist = f"{name.replace('-', '_')}-{version}"
    with zipfile.ZipFile(folder / f"{dist}-py3-none-any.whl", "w") as zf:
        meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
        zf.writestr(f"{dist}.dist-info/METADATA", meta)
        zf.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: speceq-tests\n"
                                              "Root-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{dist}.dist-info/RECORD", "")


def _dry_run(wheel: Path, links: Path, requirement: str) -> subprocess.CompletedProcess[str]:
    return _run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--find-links", str(links),
                 str(wheel), requirement])


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    links = tmp_path_factory.mktemp("links")
    _stand_in_wheel(links, "torch", "2.9.1")
    _stand_in_wheel(links, "transformers", "5.30.0")
    _stand_in_wheel(links, "torch", "1.13.1")
    # an inference stack that pins its own torch and transformers, as vLLM's wheels do
    _stand_in_wheel(links, "engine-stack", "1.0", ("torch==2.9.1", "transformers==5.30.0"))
    _stand_in_wheel(links, "old-stack", "1.0", ("torch==1.13.1",))
    return links


def test_resolver_accepts_speceq_next_to_another_torch_and_transformers(wheel: Path, stand_ins: Path) -> None:
    proc = _dry_run(wheel, stand_ins, "engine-stack==1.0")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    would = next(line for line in proc.stdout.splitlines() if line.startswith("Would install"))
    assert "torch-2.9.1" in would and "transformers-5.30.0" in would and "speceq-0.1.0" in would, would


def test_resolver_check_can_fail(wheel: Path, stand_ins: Path) -> None:
    """The same check refuses a torch outside speceq's declared range (so the test above can fail)."""
    proc = _dry_run(wheel, stand_ins, "old-stack==1.0")
    assert proc.returncode != 0
    assert "ResolutionImpossible" in proc.stdout + proc.stderr or "conflict" in (proc.stdout + proc.stderr).lower()
