"""Hooks the speceq pytest plugin calls; implement them in a ``conftest.py`` or a plugin.

Added to pytest's hook registry by :func:`speceq.faces.plugin.pytest_addhooks`. Nothing heavy is
imported here: the annotations are strings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from speceq.engines.base import Engine
    from speceq.verdicts.result import RunResult


@pytest.hookspec(firstresult=True)
def pytest_speceq_make_engine(config: pytest.Config, role: str, spec: str, options: dict[str, Any]) -> Engine | None:
    """Build the engine of ``role`` (``"baseline"``, ``"candidate"`` or ``"control"``, the numerics control), or return None.

    Called once per distinct (spec, options) of a session; the engine is then cached and
    shared by every test. The first non-None result wins; when every implementation
    returns None the engine registry resolves ``spec`` with ``options``
    (:func:`speceq.engines.registry.resolve_engine`). Use it to build an engine that
    needs more than a spec string, e.g. in ``conftest.py``::

        def pytest_speceq_make_engine(config, role, spec, options):
            if spec == "my-server":
                return OpenAICompletionsEngine(base_url=os.environ["SERVER_URL"], **options)
            return None
    """


def pytest_speceq_result(config: pytest.Config, item: pytest.Item, result: RunResult) -> None:
    """Called after every check of a test with its :class:`~speceq.verdicts.result.RunResult`.

    Runs before the plugin applies the verdict to the test (fail, skip or pass), on the
    process that ran the test (an xdist worker under ``-n``). For custom logging or upload::

        def pytest_speceq_result(config, item, result):
            print(item.nodeid, result.summary())
    """
