"""Fixtures of the report tests: the stored example result and its rendered page."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from chromium_cdp import CHROMIUM, Chromium
from report_example import EXAMPLE_FILE, MUTANT_FILE

from speceq.reports import render_report
from speceq.verdicts.result import RunResult


@pytest.fixture(scope="session")
def example_result() -> RunResult:
    """The fixed example, read from disk the way ``speceq report`` reads a saved result."""
    return RunResult.from_json(EXAMPLE_FILE.read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def mutant_result() -> RunResult:
    """A real run (benchmarks/report_gallery.py): baseline vs mutant:resample-from-target, 300 samples, oracle on."""
    return RunResult.from_json(MUTANT_FILE.read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def example_html(example_result: RunResult) -> str:
    return render_report(example_result)


@pytest.fixture(scope="module")
def chromium() -> Iterator[Chromium]:
    """A headless Chromium; skipped when Debian's chromium is absent, except under CI=true (then it fails)."""
    if not CHROMIUM.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{CHROMIUM} is missing but CI=true: install it with `apt-get install -y chromium`")
        pytest.skip(f"{CHROMIUM} not installed (apt-get install -y chromium); browser tests run in CI")
    with Chromium() as browser:
        yield browser
