"""The plugin registers exactly once: entry point, root conftest, -p, and -p no:speceq; suites collect."""

from __future__ import annotations

import pytest

from plugin_support import REPO

USES_FIXTURE = """
def test_uses_fixture(speceq, request):
    names = [name for name, plugin in request.config.pluginmanager.list_name_plugin()
             if getattr(plugin, "__name__", None) == "harness.plugin"]
    print("REGISTERED-AS", names)
"""


def fake_installed_entry_point(project: pytest.Pytester) -> None:
    """A dist-info on PYTHONPATH declaring the pytest11 entry point, as ``pip install -e .`` does."""
    dist = project.mkdir("site").joinpath("speceq_fake-0.1.dist-info")
    dist.mkdir()
    dist.joinpath("METADATA").write_text("Metadata-Version: 2.1\nName: speceq-fake\nVersion: 0.1\n")
    dist.joinpath("entry_points.txt").write_text("[pytest11]\nspeceq = harness.plugin\n")


@pytest.mark.parametrize(("installed", "extra", "expected"), [
    (False, (), "['harness.plugin']"),  # the root conftest registers it
    (False, ("-p", "harness.plugin"), "['harness.plugin']"),  # -p first; the conftest sees it
    (True, (), "['speceq']"),  # the entry point; the conftest does nothing
])
def test_registered_once(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, installed: bool,
                         extra: tuple[str, ...], expected: str) -> None:
    if installed:
        fake_installed_entry_point(project)
        monkeypatch.setenv("PYTHONPATH", f"{project.path / 'site'}:{REPO}:{project.path}")
    project.makepyfile(test_wired=USES_FIXTURE)
    result = project.runpytest_subprocess("-s", *extra)
    result.assert_outcomes(passed=1)
    assert f"REGISTERED-AS {expected}" in result.stdout.str()


def test_blocking_the_plugin_is_respected(project: pytest.Pytester) -> None:
    project.makepyfile(test_wired=USES_FIXTURE)
    result = project.runpytest("-p", "no:speceq")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'speceq' not found*"])


def test_suites_collect_from_the_checkout_and_as_an_installed_package(project: pytest.Pytester) -> None:
    # from another folder, as `pytest --pyargs suites` runs them after `pip install`
    result = project.runpytest_subprocess("--pyargs", "suites", "--collect-only", "-q", "-p", "harness.plugin")
    assert result.ret == 0, result.stdout.str()
    ids = [line for line in result.stdout.lines if "::" in line]
    assert len(ids) == 25
    for module in ("test_temperature", "test_sampling_params", "test_batch_invariance", "test_greedy",
                   "test_long_and_eos", "test_repeatability"):
        assert any(f"{module}.py::" in i for i in ids), module
