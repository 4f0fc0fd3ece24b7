"""The HTML matrix of speceq audit: content and escaping, and the page in headless Chromium."""

from __future__ import annotations

from pathlib import Path

import pytest
from audit_example import PAYLOAD, example_audit
from chromium_cdp import Chromium

from speceq.errors import ConfigError
from speceq.reports.audit import render_audit_report, write_audit_report


def test_the_page_has_a_row_per_method_a_column_per_setting_and_shape_escaped() -> None:
    audit = example_audit().to_dict()
    html = render_audit_report(audit)
    assert "<title>speceq audit transformers — SHIFTED</title>" in html
    assert html.count('<th class="method">') == 2
    assert html.count('<td class="cell ') == 8
    assert 'href="cells/hf-universal/t1-single/result.json"' in html
    assert 'href="cells/hf-universal/t1-single/report.html"' in html
    assert "speceq run --candidate hf-universal --out audit/cells/hf-universal/t1-single" in html  # shifted: its command
    assert "speceq run --candidate hf-assisted" not in html
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert html == render_audit_report(audit)


def test_rows_of_several_worlds_name_their_world_and_one_world_does_not() -> None:
    one = render_audit_report(example_audit().to_dict())
    assert '<span class="world">' not in one and "<tr><th>world</th><td>byte</td></tr>" in one
    audit = {**example_audit().to_dict(), "world": None, "method_worlds": {"hf-assisted": "byte", "hf-universal": "mtp"}}
    html = render_audit_report(audit)
    assert '<th class="method">hf-universal <span class="world">(mtp)</span></th>' in html
    assert '<th class="method">hf-assisted <span class="world">(byte)</span></th>' in html
    assert "<tr><th>world</th><td>each method in its own: byte, mtp</td></tr>" in html


def test_a_malformed_audit_is_refused() -> None:
    with pytest.raises(ConfigError, match="not a speceq audit: missing 'cells'"):
        render_audit_report({k: v for k, v in example_audit().to_dict().items() if k != "cells"})


@pytest.mark.browser
def test_the_matrix_in_chromium(chromium: Chromium, tmp_path: Path) -> None:
    path = write_audit_report(example_audit().to_dict(), tmp_path / "audit.html")
    page = chromium.load(path, width=1280)
    assert page.evaluate("document.title") == "speceq audit transformers — SHIFTED"
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.evaluate("document.querySelectorAll('script, img, iframe, object, embed, link').length") == 0
    assert page.evaluate("document.querySelectorAll('table.matrix tbody tr').length") == 2
    assert page.evaluate("document.querySelectorAll('table.matrix thead tr:nth-child(2) th').length") == 4
    words = page.evaluate("[...document.querySelectorAll('table.matrix tbody tr')].map(r => "
                          "[...r.querySelectorAll('td .word')].map(w => w.innerText))")
    assert words == [["equivalent", "not supported", "inconclusive", "not supported"],
                     ["shifted", "not supported", "not run", "not supported"]]
    shifted = "document.querySelector('td[data-cell=\"hf-universal/t1/single\"]')"
    assert page.evaluate(f"getComputedStyle({shifted}).backgroundColor") == "rgb(255, 235, 233)"
    assert page.evaluate(f"{shifted}.querySelector('a').href") == (tmp_path / "cells/hf-universal/t1-single/result.json").as_uri()
    assert PAYLOAD in page.evaluate("document.body.textContent")
    # the matrix fits the page: no horizontal scrolling at 1280 px
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    png = page.screenshot()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    log = page.log()
    assert log.errors() == []
    assert log.requests == [path.resolve().as_uri()]
