"""The speceq pytest plugin (entry point ``speceq``): hooks only.

Options (group ``speceq``, prefix ``--speceq-``, ini mirrors ``speceq_*``) are defined in
:mod:`speceq.faces.pytest_support.options`; the per-session state in
:mod:`speceq.faces.pytest_support.session`; the ``speceq`` fixture's checker in
:mod:`speceq.faces.pytest_support.checker`. Nothing heavy is imported until a test asks for the
fixture, so collecting a project that has this plugin installed costs nothing.

Markers: ``speceq_case(**fields)`` (a case, as in a cases file, for ``speceq.check()``
without arguments; repeatable) and ``speceq_budget(samples=N)`` (this test's samples per
case and engine; ``--speceq-samples`` on the command line overrides it).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import pytest

from speceq.faces.pytest_support.options import add_options, resolve_settings

if TYPE_CHECKING:
    from speceq.faces.pytest_support.checker import EquivalenceChecker
    from speceq.faces.pytest_support.kernel_checker import KernelChecker

SESSION_KEY = pytest.StashKey["EquivalenceSession"]()
SESSION_PLUGIN_NAME = "speceq-session"
MARKERS = (
    "speceq_case(**fields): a case for speceq.check() without arguments (the fields of a cases-file entry: "
    "id, prompt or prompt_ids, temperature, top_k, top_p, max_new_tokens, ignore_eos, batch_size, companions)",
    "speceq_budget(samples): samples per case and engine of this test's checks "
    "(--speceq-samples on the command line overrides it)",
)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from speceq.faces import hookspec

    pluginmanager.add_hookspecs(hookspec)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    from speceq.faces.pytest_support.session import EquivalenceSession

    for line in MARKERS:
        config.addinivalue_line("markers", line)
    session = EquivalenceSession(config, resolve_settings(config))
    config.stash[SESSION_KEY] = session
    config.pluginmanager.register(session, SESSION_PLUGIN_NAME)


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session is not None and config.pluginmanager.is_registered(session):
        config.pluginmanager.unregister(session)


@pytest.fixture
def speceq(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> EquivalenceChecker:
    """An equivalence checker for this test: ``speceq.check(case_or_cases, **overrides)``.

    Fails the test with the evidence when the candidate is shifted; applies
    ``--speceq-inconclusive`` when a check is inconclusive. See
    :class:`speceq.faces.pytest_support.checker.EquivalenceChecker`.
    """
    from speceq.faces.pytest_support.checker import EquivalenceChecker, _safe_name

    session = request.config.stash[SESSION_KEY]
    if session.settings.store is not None:
        root = session.settings.store / _safe_name(request.node.nodeid)
    else:
        root = tmp_path_factory.mktemp(_safe_name(request.node.name, limit=40, digest=False), numbered=True)
    return EquivalenceChecker(session, request.node, root, shared=session.shared_root(tmp_path_factory))


@pytest.fixture
def speceq_kernel(request: pytest.FixtureRequest) -> KernelChecker:
    """A kernel checker for this test: ``speceq_kernel.check(fn, spec=None, **overrides)``.

    Fails the test with the diagnosis when the kernel is shifted. See
    :class:`speceq.faces.pytest_support.kernel_checker.KernelChecker`.
    """
    from speceq.faces.pytest_support.kernel_checker import KernelChecker

    return KernelChecker(request.config.stash[SESSION_KEY], request.node)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    """Add the ``speceq`` section (and a pytest-html extra) to the report of a test that ran checks."""
    report = yield
    if report.when != "call":
        return report
    from speceq.faces.pytest_support.session import ITEM_NOTES_KEY, ITEM_RESULTS_KEY

    results = item.stash.get(ITEM_RESULTS_KEY, [])
    notes = item.stash.get(ITEM_NOTES_KEY, [])
    if not results and not notes:
        return report
    from speceq.faces.pytest_support.explain import section_text

    text = section_text(results, notes)
    report.sections.append(("speceq", text))
    html = item.config.pluginmanager.getplugin("html")
    if html is not None:
        extras = list(getattr(report, "extras", []))
        extras.append(html.extras.text(section_text(results, notes, detail=True), name="speceq"))
        report.extras = extras
    return report
