"""The CI recipe cannot rot: examples/ci-project is run as its GitHub Actions workflow runs it.

The example project is copied into a pytester folder; the workflow's install step must
install speceq (through the project's test extra) and the pinned CPU torch of the README; the
workflow's own pytest command runs there (with a small sample budget), its tests end as
expected (a correct sampler is not shifted, the buggy negative control is) and the reports it
uploads are written; the ready-made-suites step collects with the same ini settings. The
workflow shown in docs/how-to/ci-with-pytest.md is this file, byte for byte.

Runs in a subprocess, as CI does (the project's pyproject.toml is its ini file).
"""

from __future__ import annotations

import re
import shlex
import shutil
import tomllib
import xml.etree.ElementTree as ET
from typing import Any

import pytest
import yaml  # PyYAML: a dependency of transformers, so always installed with speceq
from docs_support import REPO
from packaging.requirements import Requirement

PROJECT = REPO / "examples" / "ci-project"
WORKFLOW = PROJECT / ".github" / "workflows" / "speceq.yml"
#: Samples per case and engine in this test: what keeps it short; the workflow uses the ini's.
SMALL_BUDGET = "--speceq-samples=200"


def workflow_steps() -> list[dict[str, Any]]:
    workflow = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    (job,) = workflow["jobs"].values()
    return job["steps"]


def step(name_start: str) -> dict[str, Any]:
    found = [s for s in workflow_steps() if s.get("name", "").startswith(name_start)]
    assert len(found) == 1, f"expected one workflow step named {name_start!r}..., got {len(found)}"
    return found[0]


def pytest_args(run: str) -> list[str]:
    words = shlex.split(run)
    assert words[:3] == ["python", "-m", "pytest"], f"expected a `python -m pytest ...` step, got {run!r}"
    return words[3:]


def test_the_workflow_installs_speceq_and_the_readme_torch() -> None:
    install = step("Install")["run"]
    commands = [shlex.split(line) for line in install.strip().splitlines()]
    assert ["python", "-m", "pip", "install", "-e", ".[test]"] in commands, install
    extra = tomllib.loads((PROJECT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    speceq_reqs = [r for r in map(Requirement, extra["optional-dependencies"]["test"]) if r.name == "speceq"]
    assert speceq_reqs, "the example project's test extra does not install speceq"
    readme_torch = re.search(r"pip install (torch==[\w.+]+)", (REPO / "README.md").read_text(encoding="utf-8"))
    assert readme_torch, "README.md has no `pip install torch==...` command"
    assert readme_torch.group(1) in install, f"the workflow does not pin {readme_torch.group(1)} as README.md does"


def test_the_workflow_uploads_the_reports_it_writes() -> None:
    upload = step("Upload")
    assert upload["uses"].startswith("actions/upload-artifact@") and upload["if"] == "always()"
    folder = upload["with"]["path"].rstrip("/")
    for name in ("Equivalence tests", "speceq's ready-made suites"):
        args = pytest_args(step(name)["run"])
        reports = [a.split("=", 1)[1] for a in args if a.startswith(("--speceq-report=", "--junitxml="))]
        assert len(reports) == 2 and all(r.startswith(folder + "/") for r in reports), (name, reports, folder)


def test_the_docs_show_this_workflow() -> None:
    text = (REPO / "docs" / "how-to" / "ci-with-pytest.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    assert WORKFLOW.read_text(encoding="utf-8") in blocks, "docs/how-to/ci-with-pytest.md must show the example's workflow verbatim"


@pytest.fixture
def ci_project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A copy of the example project, with the environment of the workflow's test steps."""
    ignore = shutil.ignore_patterns("__pycache__", ".pytest_cache", "speceq-store", "speceq-report")
    shutil.copytree(PROJECT, pytester.path, dirs_exist_ok=True, ignore=ignore)
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    monkeypatch.delenv("PYTHONPATH", raising=False)  # the project finds my_sampler through its ini's pythonpath
    for key, value in step("Equivalence tests")["env"].items():
        monkeypatch.setenv(key, value)
    return pytester


def test_the_workflow_runs_the_example_tests(ci_project: pytest.Pytester) -> None:
    args = pytest_args(step("Equivalence tests")["run"])
    result = ci_project.runpytest_subprocess(*args, SMALL_BUDGET, "-p", "no:cacheprovider")
    out = result.stdout.str()
    result.stdout.fnmatch_lines(["speceq: baseline=baseline candidate=my_sampler:sample *samples=200 (command line)*"])
    # correct sampler: never shifted; at 200 samples two multi-token checks cannot certify TV < 0.05
    # (skipped, with the samples that would decide); greedy rows match; the buggy control is shifted
    result.assert_outcomes(passed=2, skipped=2)
    assert out.count("samples per engine would decide") == 2, out
    report = ci_project.path / "speceq-report" / "tests.html"
    assert report.is_file() and report.with_suffix(".json").is_file()
    junit = ET.parse(ci_project.path / "speceq-report" / "tests.xml")
    verdicts = {case.get("name"): [p.get("value") for p in case.iter("property")] for case in junit.iter("testcase")}
    assert verdicts == {"test_sampling_matches_the_model": ["inconclusive"], "test_top_p": ["inconclusive"],
                        "test_greedy": ["equivalent"], "test_negative_control_is_caught": ["shifted"]}, verdicts


def test_the_suites_step_collects_with_the_project_settings(ci_project: pytest.Pytester) -> None:
    args = pytest_args(step("speceq's ready-made suites")["run"])
    result = ci_project.runpytest_subprocess(*args, "--collect-only", "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines([
        "speceq: baseline=baseline candidate=my_sampler:sample *samples=500 (command line)*",
        "*<Module test_temperature.py>", "*<Function test_first_token*", "*tests collected in*",
    ])


def test_the_example_project_is_complete() -> None:
    names = {p.relative_to(PROJECT).as_posix() for p in PROJECT.rglob("*") if p.is_file()}
    assert {"pyproject.toml", "my_sampler.py", "tests/test_equivalence.py", ".github/workflows/speceq.yml",
            "README.md"} <= names, names
