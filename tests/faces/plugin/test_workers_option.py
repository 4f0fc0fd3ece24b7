"""--speceq-workers: the session samples on worker processes as `speceq run` does (default auto, from one
home), started once for all its checks, with the samples of a serial session; 1 (command line or ini)
samples in the pytest process; under pytest-xdist auto is capped at the process's share of the CPUs."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from plugin_support import INI, TOY

import speceq.pipeline.collect as collect_pkg
from speceq.core.defaults import DEFAULT_WORKERS
from speceq.faces.pytest_support.options import OPTION_BY_NAME
from speceq.faces.pytest_support.session import xdist_share
from speceq.store import load_samples_frame

ARGS = (*TOY, "--speceq-samples=1000", "--speceq-store=samples", "--speceq-inconclusive=pass")

TWO_CHECKS = """
def test_a(speceq):
    speceq.run(speceq.case(id="a", prompt_ids=[1, 2], max_new_tokens=3))

def test_b(speceq):
    speceq.run(speceq.case(id="b", prompt_ids=[3], max_new_tokens=4, temperature=0.7))
"""

#: Writes how many worker processes the session started, read before the session stops them.
COUNT_STARTED = """
import pytest

@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_sessionfinish(session):
    plugin = session.config.pluginmanager.get_plugin("speceq-session")
    (session.config.rootpath / "started.txt").write_text(str(plugin.pool.started))
    yield
"""


def _executors(project: pytest.Pytester) -> dict[str, str]:
    out = {}
    for test in ("test_a", "test_b"):
        (provenance,) = (project.path / "samples").glob(f"*{test}*/check1-*/provenance.json")
        out[test] = json.loads(provenance.read_text())["executor"]
    return out


def _frames(project: pytest.Pytester) -> dict:
    return {test: load_samples_frame(next((project.path / "samples").glob(f"*{test}*/check1-*")))
            .sort_values(["engine", "case", "slice", "row"]).reset_index(drop=True) for test in ("test_a", "test_b")}


def _session(project: pytest.Pytester, *args: str) -> None:
    project.makepyfile(test_two=TWO_CHECKS)
    conftest = project.path.joinpath("conftest.py").read_text(encoding="utf-8")
    if COUNT_STARTED not in conftest:
        project.makeconftest(conftest + COUNT_STARTED)
    project.runpytest(*ARGS, *args).assert_outcomes(passed=2)


def test_the_default_is_the_run_default_from_one_home() -> None:
    from speceq.faces.cli import build_parser

    run_args = build_parser().parse_args(["run"])
    assert run_args.workers is DEFAULT_WORKERS is None  # auto
    assert OPTION_BY_NAME["workers"].default is DEFAULT_WORKERS
    assert OPTION_BY_NAME["workers"].convert("auto") is None and OPTION_BY_NAME["workers"].convert("3") == 3


def test_by_default_two_checks_share_the_auto_worker_processes_and_draw_the_serial_samples(
        project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(collect_pkg, "usable_cpus", lambda: 2)  # an idle 2-core machine
    monkeypatch.setattr(collect_pkg, "busy_cpus_now", lambda: 0.0)
    _session(project, "--speceq-workers=auto")  # the plugin tests' ini pins 1; auto is the built-in default
    executors = _executors(project)
    assert all(e.startswith("2 worker processes kept across runs") and "--workers auto: 2 (" in e
               for e in executors.values())
    assert (project.path / "started.txt").read_text() == "2"  # two processes for the whole session
    parallel = _frames(project)

    project.path.joinpath("samples").rename(project.path / "parallel")
    _session(project, "--speceq-workers=1")
    assert set(_executors(project).values()) == {"serial, in this process"}
    assert (project.path / "started.txt").read_text() == "0"
    serial = _frames(project)
    assert all(parallel[t].equals(serial[t]) for t in parallel)


def test_the_ini_sets_the_count_and_the_command_line_wins(project: pytest.Pytester,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(collect_pkg, "usable_cpus", lambda: 2)
    monkeypatch.setattr(collect_pkg, "busy_cpus_now", lambda: 0.0)
    project.makeini(INI.replace("speceq_workers = 1", "speceq_workers = 2"))
    _session(project)
    assert all(e.startswith("2 worker processes kept across runs") for e in _executors(project).values())
    assert "--workers auto" not in "".join(_executors(project).values())  # a fixed count, not auto
    project.path.joinpath("samples").rename(project.path / "first")
    _session(project, "--speceq-workers=1")
    assert set(_executors(project).values()) == {"serial, in this process"}


def test_a_bad_count_is_a_usage_error(project: pytest.Pytester) -> None:
    result = project.runpytest("--speceq-workers=0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "argument --speceq-workers: expected 'auto' or an integer >= 1, got '0'" in result.stderr.str()


def test_under_xdist_auto_gets_the_cpus_divided_by_the_xdist_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(collect_pkg, "usable_cpus", lambda: 2)
    assert xdist_share(SimpleNamespace()) is None  # not under xdist: no cap
    assert xdist_share(SimpleNamespace(workerinput={"workerid": "gw0", "workercount": 2})) == 1
    assert xdist_share(SimpleNamespace(workerinput={"workerid": "gw0", "workercount": 3})) == 1
    monkeypatch.setattr(collect_pkg, "usable_cpus", lambda: 16)
    assert xdist_share(SimpleNamespace(workerinput={"workerid": "gw0", "workercount": 4})) == 4
