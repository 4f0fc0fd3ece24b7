"""Packaging: the wheel built from a clean copy of the checkout holds every package and runs on its own.

The wheel is built once per module from a copy of the checkout's files (tracked and untracked but
not ignored, as a fresh clone plus local edits would have them: no stale build/ or egg-info), with
no build isolation and no network. It is installed into a virtual environment that sees neither the
checkout nor an editable install: the venv has no system site-packages of its own, and the machine's
site-packages directories are put on its path by a plain ``.pth`` line, so torch and numpy import but
the ``.pth`` files there (an editable install's import finder) are never run. speceq then imports
only from the wheel, and a package missing from the wheel fails here as it would for a user.
The resolver check uses stand-in wheels of torch/transformers versions other than the installed
ones, built here, with ``--no-index``: pip resolves for real and downloads nothing.
"""

from __future__ import annotations

import importlib.metadata
import shutil
import site
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


#: the product folders and the import package each installs as (pyproject.toml / setup.py)
FOLDERS = {"harness": "speceq", "reports": "speceq.reports", "suites": "speceq.suites"}


def _checkout_files() -> list[str]:
    """The checkout's files as a clone plus local edits has them (tracked, or untracked and not ignored)."""
    proc = _run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=REPO)
    if proc.returncode != 0:
        pytest.skip(f"not a git checkout, so no clean copy can be made: {proc.stderr.strip()}")
    return [f for f in proc.stdout.split("\0") if f and (REPO / f).is_file()]


@pytest.fixture(scope="module")
def clean_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the checkout without ignored files (build/, *.egg-info, __pycache__, speceq-out/)."""
    root = tmp_path_factory.mktemp("clean") / "speceq"
    for name in _checkout_files():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, root / name)
    return root


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory, clean_copy: Path) -> Path:
    """speceq's wheel, built from the clean copy."""
    out = tmp_path_factory.mktemp("wheel")
    # pyproject.toml's license fields need setuptools >= 77 (PEP 639): use this environment's
    # setuptools when it is recent enough (fast, offline), else let pip build in isolation
    isolation = [] if _setuptools_version() < (77,) else ["--no-build-isolation"]
    proc = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-q", "-w", str(out), str(clean_copy)])
    assert proc.returncode == 0, proc.stderr
    (whl,) = out.glob("speceq-*.whl")
    return whl


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    """A venv that imports speceq from the wheel only: machine packages on its path, no .pth of theirs run."""
    root = tmp_path_factory.mktemp("venv") / "env"
    proc = _run([sys.executable, "-m", "venv", "--without-pip", str(root)])
    assert proc.returncode == 0, proc.stderr
    # a plain directory line: Python adds the folder to sys.path and runs none of the .pth files
    # inside it, so the editable install's finder (a .pth there) never maps speceq onto the checkout
    machine = [d for d in site.getsitepackages() if Path(d).is_dir()]
    (_site_packages(root) / "machine-packages.pth").write_text("".join(f"{d}\n" for d in machine))
    proc = _run([sys.executable, "-m", "pip", "--python", str(root / "bin" / "python"), "install", "-q",
                 "--no-deps", "--no-index", str(wheel)])
    assert proc.returncode == 0, proc.stderr
    return root


def _site_packages(venv: Path) -> Path:
    (site_dir,) = (venv / "lib").glob("python3*/site-packages")
    return site_dir


def _isolated_env(home: Path) -> dict[str, str]:
    """An environment with nothing that could point Python at the checkout."""
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "SPECEQ_TORCH_THREADS": "1"}


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
    assert [e for e in entries if not e.endswith((".dist-info", ".pth"))] == ["speceq"], entries
    assert [e for e in entries if e.endswith(".dist-info")] == ["speceq-0.1.0.dist-info"], entries
    python = str(venv / "bin" / "python")
    proc = _run([python, "-c", "import sys, speceq; print(speceq.__file__); print('torch' in sys.modules)"])
    assert proc.returncode == 0, proc.stderr
    where, torch_loaded = proc.stdout.split()
    assert Path(where).is_relative_to(_site_packages(venv)), where
    assert torch_loaded == "False"
    proc = _run([python, "-m", "speceq", "--help"])
    assert proc.returncode == 0 and "run" in proc.stdout, proc.stderr


def test_every_package_folder_of_the_checkout_is_in_the_wheel(clean_copy: Path, wheel: Path) -> None:
    """A folder of Python modules under harness/, reports/ or suites/ that the wheel lacks fails here."""
    names = set(zipfile.ZipFile(wheel).namelist())
    expected, missing = [], []
    for folder, package in FOLDERS.items():
        for module in sorted((clean_copy / folder).rglob("*.py")):
            inner = module.parent.relative_to(clean_copy / folder)
            target = "/".join([*package.split("."), *inner.parts, module.name])
            expected.append(target)
            if target not in names:
                missing.append(f"{module.relative_to(clean_copy)} -> {target}")
    assert len(expected) > 100, expected  # the walk found the package, not an empty folder
    assert not missing, "modules of the checkout missing from the wheel:\n" + "\n".join(missing)


def test_wheel_alone_runs_the_main_job_the_kernel_check_and_the_fixture(venv: Path, tmp_path: Path) -> None:
    """The commands a user of the wheel runs first: ``python -m speceq run``, ``speceq kernel``, the fixture."""
    python, env = str(venv / "bin" / "python"), _isolated_env(tmp_path)
    out = tmp_path / "out"
    proc = _run([python, "-m", "speceq", "run", "--samples", "100", "--chunk-size", "100", "--workers", "1",
                 "--out", str(out)], cwd=tmp_path, env=env)
    # 100 samples cannot certify the tolerance: inconclusive (exit 3) is the expected verdict, not a crash (2)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "run verdict INCONCLUSIVE" in proc.stdout and (out / "result.json").is_file(), proc.stdout
    shutil.copy(REPO / "examples" / "kernels" / "my_kernel.py", tmp_path / "my_kernel.py")
    proc = _run([str(venv / "bin" / "speceq"), "kernel", "my_kernel.py:my_kernel", "--scale", "0.05",
                 "--json", "kernel.json"], cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "kernel.json").is_file()
    (tmp_path / "test_fixture.py").write_text(textwrap.dedent("""
        import pytest

        @pytest.mark.speceq_case(id="def", prompt="def ", temperature=1.0, max_new_tokens=2)
        def test_marked_case(speceq):
            result = speceq.run()
            assert result.verdict in ("equivalent", "inconclusive"), result.summary()
    """))
    proc = _run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_fixture.py",
                 "--speceq-samples=100", "--speceq-store=" + str(tmp_path / "fixture-store")], cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout, proc.stdout


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
    env = _isolated_env(tmp_path)
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
