"""Render a saved :class:`~speceq.verdicts.result.RunResult` as one self-contained HTML page.

The page has no script and makes no request: CSS is inline, charts are inline SVG built from
numbers (:mod:`speceq.reports.svg`), and a Content-Security-Policy meta tag forbids any script,
image, font or connection anyway. Jinja2 autoescaping is on for every template; data is never
marked safe. The output depends only on the result, so the same result gives the same bytes.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from markupsafe import Markup

from speceq.errors import ConfigError
from speceq.reports import svg, why
from speceq.reports.format import fmt_value
from speceq.reports.templating import environment, write_page
from speceq.verdicts import reasons
from speceq.verdicts.result import CaseResult, RunResult, SampleText, TestOutcome, TokenFrequency
from speceq.verdicts.verdict import RUN_VERDICTS, Verdict

#: At most this many sample texts per engine are shown per case (the result may hold more).
MAX_SAMPLES_PER_ENGINE = 4
#: Frequency charts of the first positions are open; later positions sit in a closed <details>.
OPEN_POSITIONS = 2
#: Pointwise coverage of the uniform band drawn on PIT histograms.
PIT_BAND_LEVEL = why.PIT_BAND_LEVEL
#: Cases are shown in this order of verdicts (then in run order).


@dataclass(frozen=True, slots=True)
class TestRow:
    test: TestOutcome
    rejects: bool  # primary and Holm-adjusted p <= alpha
    decides: bool = False  # the test that made the case shifted
    note: str = ""  # the test's summary (its own TV bound, at its own level, is data in ``effect``: not repeated)


@dataclass(frozen=True, slots=True)
class PositionChart:
    position: int
    chart: Markup
    moved: int  # tokens beyond svg.MOVED_Z


@dataclass(frozen=True, slots=True)
class PitView:
    chart: Markup
    band: svg.PitBand
    axis_start: float  # the count axis starts here (zoomed), not necessarily at 0


@dataclass(frozen=True, slots=True)
class CaseView:
    """One case plus what the template needs precomputed (charts, grouping, anchors)."""

    case: CaseResult
    anchor: str
    prompt_text: str | None
    prompt_ids: str
    params: list[tuple[str, str]]
    context: list[tuple[str, str]]
    tests: list[TestRow]
    positions: list[PositionChart]
    pit: PitView | None
    tv_chart: Markup | None
    pit_law_chart: Markup | None = None  # the PIT-law bound against the tolerance, when it is the certificate in force
    samples: dict[str, list[SampleText]] = field(default_factory=dict)
    samples_hidden: int = 0
    sample_pairs: list[tuple[SampleText | None, SampleText | None]] = field(default_factory=list)
    decider: why.Decider | None = None
    plain: str = ""  # the verdict in plain words (speceq.verdicts.reasons.plain_case_summary)
    z_views: list[why.ZView] = field(default_factory=list)
    notes: tuple[str, ...] = ()  # the case's notes in words (speceq.verdicts.reasons.note_lines)
    size: str = ""  # the size of a detected difference in words (speceq.verdicts.reasons.size_words), '' when none


def _where(case: CaseResult, name: str) -> str:
    return f"case {case.case_id!r}.{name}"


def _check_count(value: object, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"expected a non-negative integer count, got {value!r}", where=where)


def _check_verdict(word: str, where: str) -> None:
    try:
        Verdict.parse(word, allowed=RUN_VERDICTS)
    except ValueError as e:
        raise ConfigError(str(e), where=where) from None


def _render_report_iv(result: RunResult) -> None:
    """Refuse results the page cannot show truthfully (wrong type, unknown verdict, bad counts)."""
    if not isinstance(result, RunResult):
        raise TypeError(f"`result` must be a RunResult, got {type(result).__name__}")
    _check_verdict(result.verdict, "result.verdict")
    for case in result.cases:
        _check_verdict(case.verdict, _where(case, "verdict"))
        _check_count(case.n_baseline, _where(case, "n_baseline"))
        _check_count(case.n_candidate, _where(case, "n_candidate"))
        for i, c in enumerate(case.pit_histogram):
            _check_count(c, _where(case, f"pit_histogram[{i}]"))
        for i, t in enumerate(case.top_tokens):
            _check_count(t.baseline_count, _where(case, f"top_tokens[{i}].baseline_count"))
            _check_count(t.candidate_count, _where(case, f"top_tokens[{i}].candidate_count"))


def _rows(mapping: Any) -> list[tuple[str, str]]:
    """Key/value rows of a mapping, keys sorted so that the page does not depend on dict order."""
    if not isinstance(mapping, dict):
        return [("value", fmt_value(mapping))]
    return [(str(k), fmt_value(mapping[k])) for k in sorted(mapping, key=str)]


def _engine_blocks(engines: dict[str, Any]) -> list[tuple[str, list[tuple[str, str]]]]:
    """Baseline first, candidate second, any other entry after, each as key/value rows."""
    order = {"baseline": 0, "candidate": 1}
    names = sorted(engines, key=lambda k: (order.get(str(k), 2), str(k)))
    return [(str(name), _rows(engines[name])) for name in names]


def _test_rows(tests: Sequence[TestOutcome], alpha: float, deciding: TestOutcome | None) -> list[TestRow]:
    return [TestRow(test=t, rejects=bool(t.primary and t.adjusted_pvalue is not None and t.adjusted_pvalue <= alpha),
                    decides=deciding is not None and t is deciding, note=t.summary)
            for t in tests]


def _sample_pairs(samples: dict[str, list[SampleText]]) -> list[tuple[SampleText | None, SampleText | None]]:
    base, cand = samples.get("baseline", []), samples.get("candidate", [])
    return [(base[i] if i < len(base) else None, cand[i] if i < len(cand) else None)
            for i in range(max(len(base), len(cand)))]


def engine_table(result: RunResult) -> list[dict[str, str]]:
    """One row per engine role (baseline, candidate, then others, then the oracle): name, kind, model, dtype, options."""
    order = {"baseline": 0, "candidate": 1}
    prov = result.provenance.get("engines") if isinstance(result.provenance, dict) else None
    rows = []
    for role in sorted(result.engines, key=lambda k: (order.get(str(k), 2), str(k))):
        cfg = result.engines[role] if isinstance(result.engines[role], dict) else {"value": result.engines[role]}
        ident = prov.get(role) if isinstance(prov, dict) and isinstance(prov.get(role), dict) else {}
        kind = str(cfg.get("engine") or cfg.get("class") or "—")
        if cfg.get("mutant"):
            kind += f" (mutant {cfg['mutant']})"
        models, dtypes = [], []
        for key, label in (("model", "target"), ("target", "target"), ("draft", "draft")):
            v = cfg.get(key)
            if isinstance(v, dict):
                models.append(f"{label} {v.get('path') or v.get('class') or '?'}")
                if v.get("dtype"):
                    dtypes.append(str(v["dtype"]))
            elif v is not None:
                models.append(f"{label} {v}")
        if cfg.get("dtype"):
            dtypes.append(str(cfg["dtype"]))
        options = dict(ident.get("options") or {}) if isinstance(ident.get("options"), dict) else {}
        for key in ("k", "num_assistant_tokens", "prompt_lookup_num_tokens"):
            if key in cfg and key not in options:
                options[key] = cfg[key]
        if isinstance(cfg.get("mutant_options"), dict):
            options.update({k: v for k, v in cfg["mutant_options"].items() if k not in options})
        rows.append({
            "role": str(role),
            "name": reasons.engine_label(result, str(role)) if role in ("baseline", "candidate") else str(cfg.get("name") or role),
            "kind": kind,
            "model": "; ".join(models) or "—",
            "dtype": ", ".join(dict.fromkeys(dtypes)) or "—",
            "options": ", ".join(f"{k}={fmt_value(options[k])}" for k in sorted(options, key=str)) or "—",
        })
    if isinstance(result.oracle, dict):
        models, dtypes = [], []
        for key, label in (("model", "target"), ("draft", "draft")):
            v = result.oracle.get(key)
            if isinstance(v, dict):
                models.append(f"{label} {v.get('path') or v.get('class') or '?'}")
                if v.get("dtype"):
                    dtypes.append(str(v["dtype"]))
            elif isinstance(v, str):
                models.append(f"{label} {v}")
        if "draft" in result.oracle and result.oracle["draft"] is None:
            models.append("no draft")
        if result.oracle.get("dtype"):
            dtypes.append(str(result.oracle["dtype"]))
        rows.append({"role": "oracle", "name": "target oracle", "kind": "scores the candidate's tokens",
                     "model": "; ".join(models) or "—", "dtype": ", ".join(dict.fromkeys(dtypes)) or "—", "options": "—"})
    return rows


def _position_charts(case: CaseResult) -> list[PositionChart]:
    by_position: dict[int, list[TokenFrequency]] = {}
    for t in case.top_tokens:
        by_position.setdefault(t.position, []).append(t)
    charts = []
    for position in sorted(by_position):
        toks = sorted(by_position[position], key=lambda t: (-(t.baseline_count + t.candidate_count), t.token))
        moved = sum(abs(svg.shift_z(t.baseline_count, t.candidate_count, case.n_baseline, case.n_candidate)) >= svg.MOVED_Z
                    for t in toks)
        charts.append(PositionChart(position, svg.frequency_chart(toks, case.n_baseline, case.n_candidate), moved))
    return charts


def _case_view(index: int, case: CaseResult, run: RunResult) -> CaseView:
    alpha = run.alpha
    case = reasons.with_token_text(case)  # tokens as text when the case names its tokenizer
    spec = case.case if isinstance(case.case, dict) else {}
    params = spec.get("params")
    ids = spec.get("prompt_ids")
    ids_text = ""
    if isinstance(ids, (list, tuple)):
        shown = ", ".join(str(i) for i in ids[:24])
        ids_text = f"{len(ids)} tokens: [{shown}{', …' if len(ids) > 24 else ''}]"
    known = {"id", "prompt_ids", "text", "params"}
    context = [(k, v) for k, v in _rows(spec) if k not in known]
    samples: dict[str, list[SampleText]] = {"baseline": [], "candidate": []}
    hidden = 0
    for s in case.samples:
        group = samples.setdefault(s.engine, [])
        if len(group) < MAX_SAMPLES_PER_ENGINE:
            group.append(s)
        else:
            hidden += 1
    pit = None
    if case.pit_histogram and sum(case.pit_histogram) > 0:
        band = svg.pit_band(case.pit_histogram, PIT_BAND_LEVEL)
        pit = PitView(svg.pit_histogram(case.pit_histogram, band), band, svg.pit_axis(case.pit_histogram, band)[0])
    tolerance_ok = isinstance(case.tolerance, (int, float)) and math.isfinite(case.tolerance) and case.tolerance > 0
    tv_chart = None
    if tolerance_ok and case.greedy is not None:  # no TV estimate; the row bound only where it means something
        bound = reasons.shown_bound(case)
        tv_chart = None if bound is None else svg.tv_scale(None, bound, float(case.tolerance))
    elif tolerance_ok and (case.tv_estimate is not None or case.tv_upper_bound is not None):
        tv_chart = svg.tv_scale(case.tv_estimate, case.tv_upper_bound, float(case.tolerance))
    pit_law_chart = None
    if tolerance_ok and case.certificate == "pit-law" and case.greedy is None and case.pit_law_upper_bound is not None:
        pit_law_chart = svg.tv_scale(None, case.pit_law_upper_bound, float(case.tolerance), quantity="PIT-law")
    deciding = reasons.deciding_test(case, alpha) if case.verdict == "shifted" and not case.hard_failures else None
    z_views = why.z_views(case, run, deciding)
    return CaseView(
        case=case,
        anchor=f"case-{index + 1}",
        prompt_text=spec.get("text") if isinstance(spec.get("text"), str) else None,
        prompt_ids=ids_text,
        params=_rows(params) if params is not None else [],
        context=context,
        tests=_test_rows(case.tests, alpha, deciding),
        positions=_position_charts(case),
        pit=pit,
        tv_chart=tv_chart,
        pit_law_chart=pit_law_chart,
        samples=samples,
        samples_hidden=hidden,
        sample_pairs=_sample_pairs(samples),
        decider=why.decider(case, run, deciding, z_views),
        plain=reasons.plain_case_summary(case, alpha),
        z_views=z_views,
        notes=reasons.note_lines(case.notes, reasons.case_token_labels(case)),
        size="" if case.size is None else reasons.size_words(case.size),
    )


def render_report(result: RunResult, kernels: Sequence[dict[str, Any]] = ()) -> str:
    """The HTML page of ``result``: one self-contained document, same result -> same string.

    ``kernels``: kernel-check results (``KernelCheckResult.to_dict()``) shown in a section of
    their own (:mod:`speceq.reports.kernels`). Raises ConfigError naming the case and field when
    the result holds an unknown verdict or a negative/non-integer count, and TypeError when
    ``result`` is not a RunResult.
    """
    from speceq.reports.kernels import render_kernel_section

    _render_report_iv(result)
    ordered = sorted(result.cases, key=lambda c: Verdict.parse(c.verdict).rank)  # stable: run order within a verdict
    views = [_case_view(i, c, result) for i, c in enumerate(ordered)]
    counts = {verdict: sum(c.verdict == verdict for c in result.cases) for verdict in RUN_VERDICTS}
    totals = {
        "baseline": sum(c.n_baseline for c in result.cases),
        "candidate": sum(c.n_candidate for c in result.cases),
        "candidate_tokens": sum(c.candidate_tokens for c in result.cases),
        "primary_tests": sum(t.primary for c in result.cases for t in c.tests) + sum(t.primary for t in result.pooled_tests),
        "tests": sum(len(c.tests) for c in result.cases) + len(result.pooled_tests),
    }
    return environment().get_template("report.html.j2").render(
        run=result,
        run_notes=reasons.note_lines(result.notes),
        plain=reasons.plain_run_summary(result),
        cases=views,
        counts=counts,
        totals=totals,
        engines=_engine_blocks(result.engines),
        engine_rows=engine_table(result),
        skipped=reasons.skipped_tests(result),
        oracle=_rows(result.oracle) if result.oracle else [],
        provenance=_rows(result.provenance),
        moved_z=svg.MOVED_Z,
        open_positions=OPEN_POSITIONS,
        pit_level=PIT_BAND_LEVEL,
        kernel_section=render_kernel_section(kernels),
    )


def write_report(result: RunResult, path: str | os.PathLike[str], kernels: Sequence[dict[str, Any]] = ()) -> Path:
    """Render ``result`` and write it to ``path`` atomically (temp file + rename); return the path.

    Parent folders are created. A reader never sees a half-written page: the file appears
    complete or not at all.
    """
    return write_page(render_report(result, kernels), path)
