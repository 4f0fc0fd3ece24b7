"""Every shifted card says why: the deciding test, its picture and what it means; and the rest of
the card is readable (one TV bound, an engine table, cases by verdict, samples side by side)."""

from __future__ import annotations

import re
from dataclasses import replace

from html_inspect import parse

from speceq.reports import render_report
from speceq.reports.render import engine_table
from speceq.reports.why import holm_level
from speceq.verdicts.result import RunResult


def _decided_block(html: str, anchor: str) -> str:
    section = re.search(rf'<section id="{anchor}" .*?</section>', html, re.S).group(0)
    block = re.search(r'<div class="decided">(.*?)\n  </div>', section, re.S)
    assert block is not None, f"{anchor} has no 'Why shifted' block"
    return block.group(1)


def test_z_test_decided_case_plots_its_path_against_the_null_band(mutant_result: RunResult) -> None:
    case = mutant_result.cases[0]
    assert case.verdict == "shifted" and case.reason.startswith("z draft drift rejects")
    html = render_report(mutant_result)
    block = _decided_block(html, "case-1")
    assert "Why shifted: z draft drift" in block
    assert "mutant:resample-from-target emits the tokens its draft model favours more often" in block
    svg = parse(block).find("svg")
    assert len(svg) == 1 and svg[0].attrs["aria-label"] == "z draft drift: running sum against its null band"
    page = parse(block)
    assert len(page.find("polygon", "band")) == 1 and len(page.find("polyline", "zpath")) == 1
    end = page.find("circle", "zend")
    assert len(end) == 1 and "out" in end[0].attrs["class"].split()  # it rejects: the path ends outside the band
    # the band is the Holm level this test was compared at: its end value is beyond z_crit * sqrt(V)
    path = next(z for z in case.z_paths if z.test == "z draft drift")
    test = next(t for t in case.tests if t.name == "z draft drift")
    from scipy import stats

    z_crit = stats.norm.isf(holm_level(test, mutant_result) / 2)
    assert abs(path.excess[-1]) / path.variance[-1] ** 0.5 > z_crit
    assert f"±{z_crit:.3g}" in block
    # the evidence table marks the deciding test
    decides = parse(html).find("tr", "decides")
    assert len(decides) == 1 and "z draft drift" in decides[0].text and "decides" in decides[0].text
    # the other z-tests are plotted too, folded
    assert {"z argmax leak", "z temperature drift"} <= {
        s.attrs["aria-label"].split(":")[0] for s in parse(html).find("svg") if "null band" in s.attrs.get("aria-label", "")}


def test_a_z_test_that_does_not_reject_ends_inside_its_band(mutant_result: RunResult) -> None:
    """Control: a z-test that does not reject ends inside its band (grey end dot, not red)."""
    html = render_report(mutant_result)
    charts = re.findall(r'<svg [^>]*aria-label="z argmax leak: running sum.*?</svg>', html, re.S)
    assert len(charts) == 1
    end = parse(charts[0]).find("circle", "zend")
    assert len(end) == 1 and end[0].attrs["class"] == "zend"


def test_chi2_and_hard_failure_cases_say_why(example_result: RunResult, example_html: str) -> None:
    chi2 = _decided_block(example_html, "case-1")  # the draft-mixture case, decided by chi2 position 0
    assert "Why shifted: chi2 position 0" in chi2 and "picks tokens at different rates" in chi2
    assert "Holm-adjusted p = 2.11e-48" in chi2
    assert parse(chi2).find("svg")[0].attrs["aria-label"].startswith("token frequencies")
    greedy = _decided_block(example_html, "case-2")
    assert "Why shifted: hard failure" in greedy and "greedy rows differ at position 2" in greedy
    assert "a correct greedy speculative decoder never does that" in greedy


def test_chi2_test_without_token_bars_is_pictured_by_its_bins(mutant_result: RunResult) -> None:
    """A deciding chi2 test on a companion prompt or the lengths has no token bars: its stored bins are drawn."""
    from speceq.verdicts.result import TestBins

    case = mutant_result.cases[0]
    tests = tuple(replace(t, adjusted_pvalue=1e-9) if t.name == "chi2 length" else replace(t, adjusted_pvalue=1.0)
                  for t in case.tests)
    bins = TestBins(test="chi2 length", labels=("4 tokens", "3 tokens", "2 tokens"), baseline_counts=(250, 40, 10),
                    candidate_counts=(150, 110, 40), n_baseline=300, n_candidate=300)
    result = replace(mutant_result, cases=(replace(case, tests=tests, test_bins=(bins,), reason="chi2 length rejects"),))
    block = _decided_block(render_report(result), "case-1")
    assert "Why shifted: chi2 length" in block and "stop (EOS) at different lengths" in block
    svg = parse(block).find("svg")
    assert svg[0].attrs["aria-label"] == "chi2 length: the bins that differ most, baseline vs candidate"
    assert "“3 tokens”" not in block and "3 tokens" in block  # bin labels as given, not as token texts


def test_one_tv_bound_per_card_with_its_confidence(example_html: str) -> None:
    page = parse(example_html)
    for i in (1, 3, 4):
        text = page.by_id(f"case-{i}").text
        assert "at confidence 1 − α = 99.9 %" in text
        assert "confidence 1-" not in text  # the tests' own bounds (other levels) are not repeated


def test_engine_panel_is_a_table_with_the_spec_typed(mutant_result: RunResult, example_result: RunResult) -> None:
    rows = engine_table(mutant_result)
    assert [r["role"] for r in rows] == ["baseline", "candidate", "oracle"]
    assert rows[2]["model"] == "target speceq/models/target; draft speceq/models/draft"
    cand = rows[1]
    assert cand["name"] == "mutant:resample-from-target"
    assert cand["kind"] == "reference-speculative (mutant resample-from-target)"
    assert cand["model"] == "target speceq/models/target; draft speceq/models/draft"
    assert cand["dtype"] == "float32" and cand["options"] == "k=4"
    html = render_report(mutant_result)
    table = parse(html).find("table", "engines")
    assert len(table) == 1
    for header in ("role", "name", "kind", "model", "dtype", "options"):
        assert header in table[0].text
    example = engine_table(example_result)
    assert example[0]["model"] == "target speceq-tiny-target" and example[0]["dtype"] == "float32"


def test_cases_are_sorted_shifted_inconclusive_equivalent(example_result: RunResult, example_html: str) -> None:
    sections = re.findall(r'<section id="case-(\d+)" class="block case v-(\w+)">', example_html)
    assert [v for _, v in sections] == ["shifted", "shifted", "inconclusive", "equivalent"]
    assert [int(i) for i, _ in sections] == [1, 2, 3, 4]
    ids = re.findall(r'<span class="case-id">(.*?)</span>', example_html)
    assert ids[0].startswith("story/T=0.8") and ids[1].startswith("greedy/") and ids[3] == "haiku/T=1"


def test_samples_are_side_by_side(example_html: str) -> None:
    grid = re.search(r'<div class="samples-side">(.*?)\n  </div>', example_html, re.S).group(1)
    cells = re.findall(r"<pre class=\"text sample\">(.*?)</pre>", grid, re.S)
    heads = re.findall(r"<h4>(\w+)</h4>", grid)
    assert heads == ["baseline", "candidate"] and len(cells) % 2 == 0 and cells


def test_skipped_draft_drift_says_how_to_enable_it(mutant_result: RunResult) -> None:
    oracle = {**mutant_result.oracle, "draft": None}
    html = render_report(replace(mutant_result, oracle=oracle))
    assert "Tests not run" in html and "draft ratio comparison not run" in html and "--oracle-draft DIR" in html
    assert "Tests not run" not in render_report(mutant_result)


def test_function_engine_is_named_by_its_spec_in_the_engine_table(mutant_result: RunResult) -> None:
    engines = {"baseline": mutant_result.engines["baseline"],
               "candidate": {"engine": "function", "name": "my_engine.py:sample",
                             "function": "speceq_user_engine_my_engine_0a1b2c:_wrap.<locals>.fn",
                             "vocab_size": 259, "eos_token_id": 257}}
    result = replace(mutant_result, engines=engines, provenance={})
    cand = engine_table(result)[1]
    assert cand["name"] == "my_engine.py:sample" and cand["kind"] == "function"
    assert not any("_wrap" in v for v in cand.values())
    table = parse(render_report(result)).find("table", "engines")[0].text
    assert "my_engine.py:sample" in table and "_wrap" not in table


def test_the_band_level_is_the_weighted_holm_step_of_the_test(mutant_result: RunResult) -> None:
    """With pooled tests in the run, a case test is compared at the cases' share of alpha, and
    the level at its step counts the pooled tests that Holm reaches after it."""
    from speceq.stats import holm
    from speceq.verdicts.decide import first_step_levels
    from speceq.verdicts.result import TestOutcome

    case_tests = [t for c in mutant_result.cases for t in c.tests if t.primary]
    weak = TestOutcome(name="pooled x comparison", family="oracle", primary=True, statistic=0.0, pvalue=1.0)
    run = replace(mutant_result, pooled_tests=(weak,))
    case_level, pooled_level = first_step_levels(run.alpha, len(case_tests), 1)
    assert case_level < run.alpha / (len(case_tests) + 1) < pooled_level
    first = min(case_tests, key=lambda t: t.pvalue)
    assert holm_level(first, run) == case_level  # the first step: the whole weight remains
    plain = run.alpha / len(case_tests)
    assert holm_level(first, mutant_result) == plain  # no pooled test: plain Holm
    # each case test's weighted step level rejects exactly what weighted Holm's adjusted p rejects
    weights = [case_level] * len(case_tests) + [pooled_level]
    adjusted = holm([t.pvalue for t in case_tests] + [1.0], weights)
    for t, adj in zip(case_tests, adjusted):
        if adj <= run.alpha and t.pvalue > 0:
            assert t.pvalue <= holm_level(t, run) * (1 + 1e-12)
