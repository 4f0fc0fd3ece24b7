"""Engine text never becomes markup: fuzzed strings in every text field render as text."""

from __future__ import annotations

import math

import pytest
from html_inspect import parse, unsafe_markup
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markupsafe import Markup
from report_example import INJECTION_SLOTS, PAYLOADS, inject

from speceq.reports import render_report
from speceq.reports.format import clean_text, fmt_num, fmt_p, token_label
from speceq.reports.svg import element, nice_ceiling, pit_band, shift_z
from speceq.verdicts.result import RunResult

_ALPHABET = st.one_of(
    st.characters(codec=None),  # any code point but surrogates
    st.characters(categories=["Cs"]),  # lone surrogates: JSON allows them, UTF-8 does not
    st.sampled_from("<>&\"'`=/\\\x00\r\n\t\x1b\x7f\x85\u2028\ufeff\ufffd"),
)
_NASTY = st.one_of(
    st.sampled_from(PAYLOADS),
    st.text(_ALPHABET, max_size=24),
    st.tuples(st.sampled_from(PAYLOADS), st.text(_ALPHABET, max_size=8)).map("".join),
)


def _tag_names(html: str) -> list[str]:
    return [t.name for t in parse(html).tags]


@pytest.fixture(scope="module")
def plain_tags(example_result: RunResult) -> list[str]:
    """Tag sequence of the page with every injected string replaced by a plain "x"."""
    return _tag_names(render_report(inject(example_result, ["x"] * INJECTION_SLOTS)))


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(strings=st.lists(_NASTY, min_size=INJECTION_SLOTS, max_size=INJECTION_SLOTS))
def test_fuzzed_text_is_escaped_everywhere(example_result: RunResult, plain_tags: list[str], strings: list[str]) -> None:
    html = render_report(inject(example_result, strings))
    html.encode("utf-8")  # strict: no lone surrogate reaches the file
    page = parse(html)
    assert unsafe_markup(page) == []
    assert "<script" not in html.lower()
    # The element structure does not depend on the text: same tags, in the same order, as with plain "x".
    assert [t.name for t in page.tags] == plain_tags
    # Sample texts, the prompt, the greedy prefix and the hard failure are shown verbatim (cleaned) in <pre>.
    for text in (strings[2], strings[8], strings[9], strings[10], strings[11]):
        assert any(clean_text(text) in pre for pre in page.pre_texts), repr(text)


@pytest.mark.parametrize("payload", PAYLOADS)
def test_each_payload_in_every_field_is_text(example_result: RunResult, payload: str) -> None:
    html = render_report(inject(example_result, [payload]))
    page = parse(html)
    assert unsafe_markup(page) == []
    assert "<script" not in html.lower()
    assert sum(payload in pre for pre in page.pre_texts) >= 5


def test_clean_text_makes_controls_visible_and_surrogates_encodable() -> None:
    assert clean_text("plain text, é 東京 🙂") == "plain text, é 東京 🙂"
    assert clean_text("a\r\nb\rc\x00d\x1be\x7f\tf\ng") == "a\nb\u240dc\u2400d\u241be\u2421\tf\ng"
    assert clean_text("\ud800x\udfff\x85") == "\ufffdx\ufffd\ufffd"
    assert clean_text("\ud800").encode("utf-8") == b"\xef\xbf\xbd"


def test_number_formats() -> None:
    assert [fmt_p(x) for x in (None, 0.5, 0.0123456, 0.001, 0.000999, 3.2e-120, 0.0, math.nan)] == [
        "—", "0.5", "0.0123", "0.001", "9.99e-04", "3.20e-120", "0 (underflow)", "nan"]
    assert [fmt_num(x) for x in (None, 20000, 0.0103, 1012.0, 2.5e9, 1e-5, True, math.inf)] == [
        "—", "20,000", "0.0103", "1,012", "2.50e+09", "1.00e-05", "true", "inf"]
    assert token_label(" the", 11) == "“ the” #11"
    assert token_label("<script>alert(1)</script>", 21) == "“<script>alert(1)<…” #21"
    assert token_label("a\nb", 5) == "“a\u21b5b” #5"


def test_svg_element_escapes_text_and_attributes_and_refuses_non_finite() -> None:
    out = element("text", {"x": 1.234567, "class": "a\"b<c"}, "<b>&", element("title", None, "'\"<"))
    assert isinstance(out, Markup)
    assert str(out) == '<text x="1.23" class="a&#34;b&lt;c">&lt;b&gt;&amp;<title>&#39;&#34;&lt;</title></text>'
    with pytest.raises(ValueError, match="finite"):
        element("rect", {"x": math.nan})


def test_nice_ceiling_and_shift_z() -> None:
    assert [nice_ceiling(x) for x in (0.37, 0.5, 0.051, 7, 1234)] == [0.5, 0.5, 0.1, 10, 2000]
    # 500/1000 vs 600/1000: pooled 0.55, se = sqrt(0.55 * 0.45 * 2/1000)
    assert shift_z(500, 600, 1000, 1000) == pytest.approx(0.1 / math.sqrt(0.55 * 0.45 * 0.002), rel=1e-12)
    assert shift_z(0, 0, 10, 10) == 0.0 and shift_z(1, 1, 0, 10) == 0.0


def test_pit_band_covers_at_least_its_level_and_is_tight() -> None:
    from scipy import stats

    band = pit_band([3000] * 20, level=0.99)
    assert band.expected == 3000 and band.outside == 0
    binom = stats.binom(60000, 1 / 20)
    assert binom.cdf(band.low - 1) <= 0.005 and binom.sf(band.high) <= 0.005  # each tail <= 0.5 %
    assert binom.cdf(band.low) > 0.005 and binom.sf(band.high - 1) > 0.005  # one step narrower misses
    assert pit_band([0, 10000], level=0.99).outside == 2
    with pytest.raises(ValueError, match="counts"):
        pit_band([])
