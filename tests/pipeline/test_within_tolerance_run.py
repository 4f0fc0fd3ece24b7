"""A run's shifted cases carry their size, and a small detected difference is within-tolerance (analysis to faces)."""

from __future__ import annotations

import math

import numpy as np

from speceq.core.defaults import DEFAULT_ALPHA, DEFAULT_SAMPLES, NUMERICS_TOLERANCE_BY_WORLD
from speceq.core.params import SamplingParams
from speceq.engines.base import SampleBatch, row_layout
from speceq.faces.cli import plain_lines, summary_markdown
from speceq.inputs.cases import Case
from speceq.pipeline.analysis import analyse_run
from speceq.stats import tv_upper_bound_two_sample
from speceq.verdicts.result import RunResult

VOCAB = 259


def _law(shift: float = 0.0) -> np.ndarray:
    p = np.zeros(VOCAB)
    p[60:72] = np.random.default_rng(0).dirichlet(np.full(12, 2.0))
    p = (1 - shift) * p
    p[70] += shift
    return p / p.sum()


def _batch(p: np.ndarray, n: int, seed: int) -> SampleBatch:
    tokens = np.random.default_rng(seed).choice(VOCAB, size=(n, 1), p=p).astype(np.int64)
    return SampleBatch(tokens=tokens, lengths=np.ones(n, dtype=np.int64), prompt_index=row_layout(1, n), wall_time_s=1.0)


def _run(shift: float, n: int, numerics_tolerance: float) -> RunResult:
    case = Case(case_id="c", prompt_ids=(100, 101), params=SamplingParams(max_new_tokens=1, ignore_eos=True))
    return analyse_run([case], {"c": _batch(_law(), n, 1)}, {"c": _batch(_law(shift), n, 2)}, oracle=None,
                       alpha=1e-3, tolerance=0.15, seed=0, engines={"baseline": {}, "candidate": {}}, provenance={},
                       numerics_tolerance=numerics_tolerance)


def test_a_small_detected_shift_is_within_tolerance_and_every_face_says_so() -> None:
    """TV 0.02 on one 12-token position at 60 000 draws per engine: detected, and certified below 0.05."""
    r = _run(0.02, 60_000, 0.05)
    (c,) = r.cases
    assert c.verdict == "within-tolerance", c.reason
    assert r.verdict == "within-tolerance" and r.exit_code == 4
    assert c.size is not None and c.size.low <= 0.02 <= c.size.high < 0.05
    assert c.size.estimate < c.size.high and c.size.estimate == c.size.estimate  # a number, not NaN
    back = RunResult.from_json(r.to_json())
    assert back == r and back.cases[0].size == c.size and back.numerics_tolerance == 0.05
    words = " ".join(line for _, line in plain_lines(r))
    assert "certified below the numerics tolerance TV 0.05" in words
    md = summary_markdown(r)
    assert "〰️ within-tolerance" in md and "numerics tolerance TV&lt;0.05" in md and "the other cases" not in md
    assert "TV=0.0" not in md  # the chi-square's plug-in TV gives way to the size


def test_off_it_is_shifted_with_the_size_in_the_reason_and_not_the_plug_in() -> None:
    r = _run(0.02, 60_000, 0.0)
    (c,) = r.cases
    assert c.verdict == "shifted" and r.exit_code == 1
    assert "size: TV" in c.reason and "held-out estimate, not the plug-in" in c.reason  # one position: one law
    assert "TV=" not in c.reason  # the test's plug-in TV is not the size any more
    assert c.size is not None and c.size.low <= 0.02 <= c.size.high


def test_a_shift_larger_than_the_tolerance_stays_shifted() -> None:
    (c,) = _run(0.1, 60_000, 0.05).cases
    assert c.verdict == "shifted" and c.size is not None and c.size.high >= 0.05
    assert "the upper bound is not below it" in c.reason


def test_at_the_default_budget_the_byte_worlds_default_cannot_be_reached() -> None:
    """The mutant gallery runs the byte world at the default 3 000 samples: the upper bound's margin alone (at one
    position, the least) is above that world's numerics tolerance, so every shifted case of it stays shifted."""
    margin = tv_upper_bound_two_sample(0.0, DEFAULT_SAMPLES, DEFAULT_SAMPLES, DEFAULT_ALPHA)
    assert margin > NUMERICS_TOLERANCE_BY_WORLD["byte"] and margin > NUMERICS_TOLERANCE_BY_WORLD["bpe"]
    assert not math.isclose(margin, NUMERICS_TOLERANCE_BY_WORLD["byte"])


def test_the_html_report_shows_the_outcome() -> None:
    from speceq.reports.render import render_report

    page = render_report(_run(0.02, 60_000, 0.05))
    assert 'class="run v-within-tolerance"' in page and "1 within-tolerance" in page
    assert "held-out estimate, not the plug-in" in page  # the case's reason, with its size
