"""The plugin registers exactly once: entry point, root conftest, -p, and -p no:speceq; suites collect.

With the package installed, ``-p speceq.faces.plugin`` on top of the entry point is a pluggy error
("already registered under a different name") that no conftest can prevent: ``-p speceq``
names the entry point instead (pytest loads ``-p`` names as entry points too).
"""

from __future__ import annotations

import pytest
from plugin_support import INI, REPO

USES_FIXTURE = """
def test_uses_fixture(speceq, request):
    names = [name for name, plugin in request.config.pluginmanager.list_name_plugin()
             if getattr(plugin, "__name__", None) == "speceq.faces.plugin"]
    print("REGISTERED-AS", names)
"""


def fake_installed_entry_point(project: pytest.Pytester) -> None:
    """A dist-info on PYTHONPATH declaring the pytest11 entry point, as ``pip install -e .`` does."""
    dist = project.mkdir("site").joinpath("speceq_fake-0.1.dist-info")
    dist.mkdir()
    dist.joinpath("METADATA").write_text("Metadata-Version: 2.1\nName: speceq-fake\nVersion: 0.1\n")
    dist.joinpath("entry_points.txt").write_text("[pytest11]\nspeceq = speceq.faces.plugin\n")


@pytest.mark.parametrize(("entry_point", "autoload", "extra", "expected"), [
    (False, False, (), "['speceq.faces.plugin']"),  # no entry point loaded: the root conftest registers it
    (False, False, ("-p", "speceq.faces.plugin"), "['speceq.faces.plugin']"),  # -p first; the conftest sees it
    (True, True, (), "['speceq']"),  # installed: the entry point; the conftest does nothing
    (True, False, ("-p", "speceq"), "['speceq']"),  # installed, autoload off: -p by entry-point name
])
def test_registered_once(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, entry_point: bool, autoload: bool,
                         extra: tuple[str, ...], expected: str) -> None:
    if entry_point:  # whether or not this checkout is pip-installed, make the entry point visible
        fake_installed_entry_point(project)
        monkeypatch.setenv("PYTHONPATH", f"{project.path / 'site'}:{REPO}:{project.path}")
    if not autoload:  # hides an installed speceq's entry point too
        monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    project.makepyfile(test_wired=USES_FIXTURE)
    result = project.runpytest_subprocess("-s", *extra)
    result.assert_outcomes(passed=1)
    assert f"REGISTERED-AS {expected}" in result.stdout.str()


def test_blocking_the_plugin_is_respected(project: pytest.Pytester) -> None:
    project.makeini(INI.replace("speceq_workers = 1\n", ""))  # without the plugin its ini option is unknown
    project.makepyfile(test_wired=USES_FIXTURE)
    result = project.runpytest("-p", "no:speceq")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'speceq' not found*"])


def test_suites_collect_from_the_checkout_and_as_an_installed_package(project: pytest.Pytester) -> None:
    # from another folder, as `pytest --pyargs suites` runs them after `pip install`
    result = project.runpytest_subprocess("--pyargs", "speceq.suites", "--collect-only", "-q")
    assert result.ret == 0, result.stdout.str()
    ids = [line for line in result.stdout.lines if "::" in line]
    assert len(ids) == 25
    for module in ("test_temperature", "test_sampling_params", "test_batch_invariance", "test_greedy",
                   "test_long_and_eos", "test_repeatability"):
        assert any(f"{module}.py::" in i for i in ids), module
