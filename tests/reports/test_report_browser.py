"""The report in headless Chromium: no console error, no request, no script run, a real screenshot.

Driven over the DevTools pipe by :mod:`chromium_cdp` (no extra Python package). Skipped when
/usr/bin/chromium is absent unless CI=true (then the fixture fails).
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest
from chromium_cdp import Chromium
from html_inspect import parse
from report_example import PAYLOADS, inject

from speceq.reports import write_report
from speceq.verdicts.result import RunResult

pytestmark = pytest.mark.browser

VIEWPORT_WIDTH = 1280


def png_header(data: bytes) -> tuple[int, int, int, int]:
    """(width, height, bit depth, colour type) from a PNG's IHDR chunk; ValueError if not a PNG."""
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        raise ValueError("not a PNG file")
    width, height, depth, colour = struct.unpack(">IIBB", data[16:26])
    return width, height, depth, colour


def png_rows(data: bytes, n_rows: int) -> list[bytes]:
    """The first ``n_rows`` unfiltered pixel rows of an 8-bit RGB or RGBA PNG (non-interlaced)."""
    width, _, depth, colour = png_header(data)
    if depth != 8 or colour not in (2, 6):
        raise ValueError(f"unsupported PNG: depth {depth}, colour type {colour}")
    bpp = 3 if colour == 2 else 4
    idat, pos = b"", 8
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + length]
        pos += 12 + length
    raw = zlib.decompressobj().decompress(idat, (width * bpp + 1) * n_rows)
    stride, prev, rows = width * bpp, bytearray(width * bpp), []
    for r in range(n_rows):
        kind, line = raw[r * (stride + 1)], bytearray(raw[r * (stride + 1) + 1:(r + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return rows


def _pixel(row: bytes, x: int, bpp: int) -> tuple[int, int, int]:
    return row[x * bpp], row[x * bpp + 1], row[x * bpp + 2]


def test_example_report_loads_clean_and_screenshots(chromium: Chromium, example_result: RunResult, tmp_path: Path) -> None:
    path = write_report(example_result, tmp_path / "report.html")
    page = chromium.load(path, width=VIEWPORT_WIDTH)
    assert page.evaluate("document.title") == "speceq report — SHIFTED"
    assert page.evaluate("document.querySelector('h1').innerText") == "SHIFTED"
    assert page.evaluate("document.querySelectorAll('section.case').length") == len(example_result.cases)
    assert page.evaluate("document.querySelectorAll('svg').length") == len(parse(path.read_text()).find("svg"))
    assert page.evaluate("document.querySelectorAll('script, img, iframe, object, embed, link').length") == 0
    assert page.evaluate("document.getElementById('case-3').innerText").count("8,077") >= 1
    height = page.evaluate("document.documentElement.scrollHeight")
    png = page.screenshot()
    (tmp_path / "report.png").write_bytes(png)
    log = page.log()
    assert log.errors() == []
    assert log.requests == [path.resolve().as_uri()], "the page requested something besides itself"

    width, png_height, _, colour = png_header(png)
    assert VIEWPORT_WIDTH - 20 <= width <= VIEWPORT_WIDTH  # minus the scrollbar
    assert abs(png_height - height) <= 2 and png_height > 3000
    assert 100_000 < len(png) < 40_000_000
    bpp = 3 if colour == 2 else 4
    rows = png_rows(png, 60)
    red = _pixel(rows[50], 40, bpp)  # inside the verdict banner, left of its text
    assert all(abs(a - b) <= 6 for a, b in zip(red, (0xCF, 0x22, 0x2E))), f"banner is {red}, not the shifted red"
    assert len(set(rows[30])) > 2, "banner row shows no text"
    # cases by verdict: shifted first, then inconclusive, then equivalent
    order = page.evaluate("[...document.querySelectorAll('section.case')].map(s => s.className.split(' ').pop())")
    assert order == ["v-shifted", "v-shifted", "v-inconclusive", "v-equivalent"]


def test_z_test_decided_card_shows_its_path_first(chromium: Chromium, mutant_result: RunResult, tmp_path: Path) -> None:
    path = write_report(mutant_result, tmp_path / "mutant.html")
    page = chromium.load(path, width=VIEWPORT_WIDTH)
    first = "document.querySelector('section.case')"
    assert page.evaluate(f"{first}.classList.contains('v-shifted')")
    assert page.evaluate(f"{first}.querySelector('.decided h3').innerText") == "Why shifted: z draft drift"
    # the "why" block comes before the case details, and its path and band are laid out at full width
    assert page.evaluate(f"{first}.querySelector('.decided').getBoundingClientRect().bottom "
                         f"< {first}.querySelector('table.kv').getBoundingClientRect().top")
    line = page.evaluate(f"(() => {{ const r = {first}.querySelector('.decided polyline.zpath').getBoundingClientRect();"
                         " return [r.width, r.height]; })()")
    band = page.evaluate(f"(() => {{ const r = {first}.querySelector('.decided polygon.band').getBoundingClientRect();"
                         " return [r.width, r.height]; })()")
    assert line[0] > 600 and line[1] > 10 and band[0] > 600 and band[1] > 50
    assert page.evaluate(f"getComputedStyle({first}.querySelector('.decided circle.zend')).fill") == "rgb(207, 34, 46)"
    assert page.evaluate(f"getComputedStyle({first}.querySelector('tr.decides td')).backgroundColor") == "rgb(255, 235, 233)"
    png = page.screenshot_element("#case-1 .decided")
    width, height, _, _ = png_header(png)
    assert 900 < width <= VIEWPORT_WIDTH and 250 < height < 800
    log = page.log()
    assert log.errors() == [] and log.requests == [path.resolve().as_uri()]


def test_the_plain_answer_comes_first_in_the_banner_and_in_every_case(chromium: Chromium, example_result: RunResult,
                                                                       tmp_path: Path) -> None:
    """#47: the verdict in plain words, above the evidence: in the banner for the run, atop each case card."""
    path = write_report(example_result, tmp_path / "report.html")
    page = chromium.load(path, width=VIEWPORT_WIDTH)
    run = page.evaluate("document.querySelector('header .run-plain').innerText")
    assert run.startswith("The candidate samples different answers from the baseline in 2 of 4 cases")
    plain = page.evaluate("[...document.querySelectorAll('section.case')].map(s => s.querySelector('.case-plain')"
                          ".innerText)")
    assert len(plain) == 4 and plain[0].startswith("The candidate samples different answers from the baseline")
    assert "'\\n' at position 0: 25.6% of the baseline's draws, 32.0% of the candidate's" in " ".join(plain)
    assert plain[2].startswith("Not decided yet") and "about 8,077 draws per engine would decide" in plain[2]
    assert plain[3].startswith("The two engines sample the same answers as far as 20,000 draws per engine can tell")
    assert "a different draw, not a different engine" in plain[3]
    # above the evidence, visible, and larger than the technical reason under it
    assert page.evaluate("(() => { const s = document.querySelector('section.case');"
                         " return s.querySelector('.case-plain').getBoundingClientRect().bottom"
                         " <= s.querySelector('.reason').getBoundingClientRect().top; })()")
    sizes = page.evaluate("[parseFloat(getComputedStyle(document.querySelector('.case-plain')).fontSize),"
                          " parseFloat(getComputedStyle(document.querySelector('.reason')).fontSize)]")
    assert sizes[0] > sizes[1]
    log = page.log()
    assert log.errors() == [] and log.requests == [path.resolve().as_uri()]


def test_injected_payloads_stay_text_and_never_run(chromium: Chromium, example_result: RunResult, tmp_path: Path) -> None:
    result = inject(example_result, list(PAYLOADS))
    path = write_report(result, tmp_path / "payloads.html")
    page = chromium.load(path, width=VIEWPORT_WIDTH)
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.evaluate("document.querySelectorAll('script, img, iframe, a[href^=javascript], style').length") == 1  # our <style>
    assert page.evaluate("document.querySelectorAll('[onerror], [onload], [onmouseover]').length") == 0
    body = page.evaluate("document.body.textContent")
    for payload in PAYLOADS:
        assert payload in body, payload
    log = page.log()
    assert log.errors() == [], "a blocked script or resource shows up here as a CSP error"
    assert log.requests == [path.resolve().as_uri()]


def test_the_browser_check_does_see_scripts_errors_and_requests(chromium: Chromium, tmp_path: Path) -> None:
    """Control: an unescaped page (no CSP) runs its script, logs an error and fetches; the driver sees all three."""
    path = tmp_path / "unsafe.html"
    path.write_text("<!DOCTYPE html><title>unsafe</title><p>x</p>"
                    "<script>window.__pwned = 1; console.error('boom')</script><img src=missing.png>", encoding="utf-8")
    page = chromium.load(path)
    assert page.evaluate("window.__pwned") == 1
    log = page.log()
    assert any("boom" in e for e in log.errors())
    assert (tmp_path / "missing.png").as_uri() in log.requests
