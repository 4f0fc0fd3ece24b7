"""The rendered report: content, determinism, atomic write, input validation, CLI."""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from html_inspect import parse, unsafe_markup
from report_example import EXAMPLE_FILE, build_example_result

from speceq.errors import ConfigError
from speceq.faces.cli import main as speceq_main
from speceq.reports import render_report, write_report
from speceq.verdicts.result import RunResult

REPO = Path(__file__).resolve().parents[2]


def shown(result: RunResult) -> list:
    """The cases in the order the page shows them: shifted, inconclusive, equivalent (run order within)."""
    order = {"shifted": 0, "inconclusive": 1, "equivalent": 2}
    return sorted(result.cases, key=lambda c: order[c.verdict])


def _approx_equal(a: Any, b: Any, path: str = "") -> list[str]:
    """Differences between two JSON-like trees; floats compared to 1e-9 relative."""
    if isinstance(a, float) and isinstance(b, float):
        return [] if math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-300) else [f"{path}: {a!r} != {b!r}"]
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{path}: keys {sorted(a)} != {sorted(b)}"]
        return [d for k in a for d in _approx_equal(a[k], b[k], f"{path}.{k}")]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return [f"{path}: length {len(a)} != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _approx_equal(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def test_stored_example_is_what_the_builder_makes(example_result: RunResult) -> None:
    diffs = _approx_equal(build_example_result().to_dict(), example_result.to_dict())
    assert not diffs, f"regenerate with `python tests/reports/report_example.py`: {diffs[:5]}"


def test_example_covers_every_kind_of_case(example_result: RunResult) -> None:
    verdicts = [c.verdict for c in example_result.cases]
    assert verdicts == ["equivalent", "shifted", "inconclusive", "shifted"]
    eq, sh, inc, greedy = example_result.cases
    assert eq.tv_upper_bound < example_result.tolerance and eq.pit_histogram
    assert any(t.primary and t.adjusted_pvalue <= example_result.alpha for t in sh.tests)
    assert inc.required_n is not None and inc.required_n > inc.n_baseline
    assert {d.classification for d in greedy.greedy.divergences} == {"near-tie", "mismatch"}
    assert any(t.oracle_prob is not None for t in sh.top_tokens)


def test_render_is_byte_identical_for_the_same_result(example_result: RunResult, example_html: str) -> None:
    again = render_report(RunResult.from_json(example_result.to_json()))
    assert again.encode("utf-8") == example_html.encode("utf-8")
    assert render_report(example_result) == example_html


def test_page_is_self_contained_and_scriptless(example_html: str) -> None:
    page = parse(example_html)
    assert unsafe_markup(page) == []
    assert "<script" not in example_html.lower()
    csp = [t for t in page.find("meta") if t.attrs.get("http-equiv") == "Content-Security-Policy"]
    assert len(csp) == 1 and "default-src 'none'" in (csp[0].attrs["content"] or "")


def test_header_shows_run_verdict_settings_and_provenance(example_result: RunResult, example_html: str) -> None:
    page = parse(example_html)
    header = page.find("header")[0]
    assert "v-shifted" in header.attrs["class"]
    assert page.find("h1")[0].text.strip() == "SHIFTED"
    settings = page.by_id("settings").text
    for expected in ("0.001", "0.05", "TV", "20240611", "reference-speculative", "speceq-tiny-draft <q8>",
                     "speceq-tiny-target", "8c0560f0d1c2b3a4e5f60718293a4b5c6d7e8f90", "2.13.0", "x86_64",
                     "40,664 baseline", "no set of", "7 primary"):
        assert expected in settings, expected


def test_case_list_links_each_case_section_with_its_reason(example_result: RunResult, example_html: str) -> None:
    page = parse(example_html)
    rows = [t for t in page.find("tr") if any(c.startswith("v-") for c in (t.attrs.get("class") or "").split())]
    assert len(rows) == len(example_result.cases)
    links = [t.attrs["href"] for t in page.find("a") if t.attrs.get("href", "").startswith("#case-")]
    assert links == [f"#case-{i + 1}" for i in range(len(example_result.cases))]
    assert [c.case_id for c in shown(example_result)] == [example_result.cases[i].case_id for i in (1, 3, 2, 0)]
    for i, (row, case) in enumerate(zip(rows, shown(example_result))):
        assert f"v-{case.verdict}" in row.attrs["class"]
        assert case.reason in row.text and case.case_id in row.text
        section = page.by_id(f"case-{i + 1}")
        assert f"v-{case.verdict}" in section.attrs["class"].split()
        assert case.case_id in section.text


def test_evidence_tables_hold_every_test_and_mark_rejections(example_result: RunResult, example_html: str) -> None:
    page = parse(example_html)
    for i, case in enumerate(shown(example_result)):
        section = page.by_id(f"case-{i + 1}").text
        primary = [t for t in page.find("table", "primary") if case.tests and case.tests[0].name in t.text]
        for t in case.tests:
            assert t.name in section
            table = "primary" if t.primary else "diagnostic"
            assert any(t.name in tb.text for tb in page.find("table", table)), (case.case_id, t.name, table)
        if not case.tests:
            assert not primary
    rejecting = sum(t.primary and t.adjusted_pvalue <= example_result.alpha for c in example_result.cases for t in c.tests)
    assert rejecting == 3
    assert len(page.find("tr", "rejects")) == rejecting
    assert all("rejects" in row.text or "decides" in row.text for row in page.find("tr", "rejects"))
    decides = page.find("tr", "decides")
    assert len(decides) == 1 and "chi2 position 0" in decides[0].text  # the shifted case's deciding test
    assert len(page.find("table", "primary")) == len(page.find("table", "diagnostic")) == 3
    smallest_q = min(t.qvalue for t in example_result.cases[1].tests if not t.primary)
    summary = page.find("details", "diagnostics")[0].text.strip().split("\n")[0]
    assert summary == f"4 diagnostic tests (smallest BH q {smallest_q:.2e})"
    shifted = page.by_id("case-1").text
    assert "2.11e-48" in shifted  # Holm-adjusted p of chi2 position 0
    assert "confidence 1-" not in shifted  # test notes do not repeat their own TV bounds


def test_charts_frequency_bars_oracle_ticks_pit_band_and_tv(example_result: RunResult, example_html: str) -> None:
    page = parse(example_html)
    positions = {(c.case_id, t.position) for c in example_result.cases for t in c.top_tokens}
    freq_svgs = [s for s in page.find("svg") if s.attrs.get("aria-label", "").startswith("token frequencies")]
    # + the shifted case's deciding test (chi2 position 0) pictured again in its "Why shifted" block
    decider = [t for t in example_result.cases[1].top_tokens if t.position == 0]
    assert len(freq_svgs) == len(positions) + 1
    with_oracle = sum(t.oracle_prob is not None for c in example_result.cases for t in c.top_tokens)
    oracle_lines = [ln for ln in page.find("line", "oracle") if float(ln.attrs["y1"]) > 17]  # not the legend's
    assert len(oracle_lines) == with_oracle + sum(t.oracle_prob is not None for t in decider) > 0
    bars = page.find("rect", "bar-base")
    assert len(bars) == len(positions) + 1 + sum(len(c.top_tokens) for c in example_result.cases) + len(decider)
    pit = [c for c in example_result.cases if c.pit_histogram]
    assert len(page.find("rect", "band")) == len(pit) == 2
    assert len(page.find("rect", "pit-in")) + len(page.find("rect", "pit-out")) == sum(len(c.pit_histogram) for c in pit)
    assert len(page.find("rect", "pit-out")) >= 5  # the shifted case's PIT slope leaves the band
    assert "99% pointwise range 2,863–3,138" in page.by_id("case-4").text
    assert len(page.find("line", "tolerance")) == sum(c.tv_estimate is not None for c in example_result.cases)
    assert len(page.find("rect", "tv-ok")) == 1 and len(page.find("rect", "tv-wide")) == 2
    moved = page.find("text", "moved")
    assert moved and all(t.text.strip() for t in moved)


def test_inconclusive_greedy_speed_samples_and_howto(example_html: str) -> None:
    page = parse(example_html)
    inconclusive = page.by_id("case-3").text
    assert "8,077" in inconclusive and "Sample size that would decide" in inconclusive
    greedy = page.by_id("case-2").text
    divergences = [t for t in page.find("table", "tests") if "margin (nats)" in t.text]
    assert len(divergences) == 1
    assert divergences[0].text.count("numerical near-tie") == 2
    assert divergences[0].text.count("real mismatch") == 1
    assert "2.31" in divergences[0].text and "7.00e-04" in divergences[0].text
    assert "61 of 64 row pairs" in greedy and "2.22×" in greedy and "83.0 %" in greedy
    assert "1,012 tokens/s" in greedy
    first = page.by_id("case-4").text
    assert "74.0 %" in first and "1.92×" in first
    assert any("<script>window.__pwned=1</script>" in t for t in page.pre_texts)
    assert any("caf\ufffd & \u2400 \u241b[31mred" in t for t in page.pre_texts)
    howto = page.by_id("how-to-read").text
    for phrase in ("same distribution is not the same text", "ordinary different draw", "numerical near-tie", "real shift"):
        assert phrase in howto


def test_write_report_is_atomic_and_creates_folders(example_result: RunResult, example_html: str, tmp_path: Path) -> None:
    target = tmp_path / "out" / "nested" / "report.html"
    assert write_report(example_result, target) == target
    assert target.read_bytes() == example_html.encode("utf-8")
    write_report(example_result, str(target))  # overwrite in place, str path
    assert sorted(p.name for p in target.parent.iterdir()) == ["report.html"]
    broken = replace(example_result, verdict="maybe")
    with pytest.raises(ConfigError, match="result.verdict"):
        write_report(broken, target)
    assert target.read_bytes() == example_html.encode("utf-8")
    assert sorted(p.name for p in target.parent.iterdir()) == ["report.html"]


def test_invalid_results_are_refused_with_the_place(example_result: RunResult) -> None:
    with pytest.raises(TypeError, match="RunResult"):
        render_report(example_result.to_dict())  # type: ignore[arg-type]
    bad_case = replace(example_result.cases[0], verdict="fine")
    with pytest.raises(ConfigError, match=r"case 'haiku/T=1'\.verdict: unknown verdict 'fine'"):
        render_report(replace(example_result, cases=(bad_case,)))
    bad_count = replace(example_result.cases[0], pit_histogram=(3, -1))
    with pytest.raises(ConfigError, match=r"pit_histogram\[1\]"):
        render_report(replace(example_result, cases=(bad_count,)))
    bad_n = replace(example_result.cases[0], n_candidate=1.5)
    with pytest.raises(ConfigError, match="n_candidate"):
        render_report(replace(example_result, cases=(bad_n,)))


def test_minimal_result_renders(example_result: RunResult) -> None:
    """A case with nothing but a verdict (no tests, charts, samples, oracle) still renders."""
    bare = replace(example_result.cases[2], tests=(), top_tokens=(), samples=(), tv_estimate=None,
                   tv_upper_bound=None, required_n=None, acceptance_rate=None, speedup_per_token=None, notes=())
    run = replace(example_result, cases=(bare,), oracle=None, provenance={}, notes=(), verdict="inconclusive")
    page = parse(render_report(run))
    assert unsafe_markup(page) == []
    text = page.by_id("case-1").text
    assert "No test outcome recorded" in text and "No TV estimate" in text
    assert "No oracle" in page.by_id("settings").text


def test_speceq_report_writes_the_page_and_reports_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            example_html: str, example_result: RunResult) -> None:
    out = tmp_path / "r.html"
    assert speceq_main(["report", str(EXAMPLE_FILE), "-o", str(out)]) == 0
    assert out.read_bytes() == example_html.encode("utf-8")
    printed = capsys.readouterr().out
    assert f"report: {out}" in printed and example_result.summary() in printed
    (tmp_path / "bad.json").write_text("{not json")
    assert speceq_main(["report", str(tmp_path / "bad.json")]) == 2
    assert f"{tmp_path / 'bad.json'}: not a speceq result.json" in capsys.readouterr().err
    (tmp_path / "wrong.json").write_text('{"cases": []}')
    assert speceq_main(["report", str(tmp_path / "wrong.json")]) == 2
    assert "wrong.json: not a speceq result.json" in capsys.readouterr().err
    assert speceq_main(["report", str(tmp_path / "missing.json")]) == 2
    assert "missing.json: cannot read the result" in capsys.readouterr().err
    unrenderable = replace(example_result, cases=(replace(example_result.cases[0], verdict="fine"),))
    (tmp_path / "unrenderable.json").write_text(unrenderable.to_json())
    assert speceq_main(["report", str(tmp_path / "unrenderable.json")]) == 2
    assert "unrenderable.json: cannot render the result: case 'haiku/T=1'.verdict" in capsys.readouterr().err
    (tmp_path / "a-file").write_text("")
    assert speceq_main(["report", str(EXAMPLE_FILE), "-o", str(tmp_path / "a-file" / "r.html")]) == 2
    assert f"{tmp_path / 'a-file' / 'r.html'}: cannot write the report" in capsys.readouterr().err


def test_python_dash_m_speceq_report_default_output(tmp_path: Path) -> None:
    src = tmp_path / "result.json"
    src.write_bytes(EXAMPLE_FILE.read_bytes())
    proc = subprocess.run([sys.executable, "-m", "speceq", "report", str(src)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert f"report: {tmp_path / 'result.html'}" in proc.stdout
    assert (tmp_path / "result.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
