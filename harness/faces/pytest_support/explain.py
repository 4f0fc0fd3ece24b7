"""Readable texts of a check: the failure explanation and the per-test report section.

A shifted case is explained by its verdict line, the primary tests that reject (with their
Holm-adjusted p-values), the tokens whose frequency moved most between baseline and
candidate, hard failures (tokens the target cannot emit, greedy mismatches) and the TV
estimate with its upper confidence bound. Pure functions of a RunResult: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from speceq.verdicts.reasons import (
    bound_line,
    case_token_labels,
    note_lines,
    plain_case_summary,
    plain_run_summary,
    skipped_tests,
    with_token_text,
)
from speceq.verdicts.result import CaseResult, RunResult, TestOutcome, TokenFrequency
from speceq.verdicts.verdict import Verdict

#: Rejecting tests and moved tokens listed per case.
MAX_TESTS = 5
MAX_TOKENS = 5
MAX_FAILURES = 5


def rejecting_tests(case: CaseResult, alpha: float) -> list[TestOutcome]:
    """Primary tests whose Holm-adjusted p-value is <= alpha, smallest first."""
    hits = [t for t in case.tests if t.primary and t.adjusted_pvalue is not None and t.adjusted_pvalue <= alpha]
    return sorted(hits, key=lambda t: (t.adjusted_pvalue, t.pvalue, t.name))


def _share(count: int, n: int) -> float:
    return count / n if n else 0.0


def moved_tokens(case: CaseResult, limit: int = MAX_TOKENS) -> list[TokenFrequency]:
    """Tokens of the case's prompt whose frequency differs most between the engines."""

    def moved(t: TokenFrequency) -> float:
        return abs(_share(t.candidate_count, case.n_candidate) - _share(t.baseline_count, case.n_baseline))

    ranked = sorted(case.top_tokens, key=lambda t: (-moved(t), t.position, t.token))
    return [t for t in ranked[:limit] if moved(t) > 0]


def _fmt_p(p: float | None) -> str:
    return "—" if p is None else f"{p:.3g}"


def _token_line(t: TokenFrequency, case: CaseResult) -> str:
    b = _share(t.baseline_count, case.n_baseline)
    c = _share(t.candidate_count, case.n_candidate)
    target = "" if t.oracle_prob is None else f", target {t.oracle_prob:.1%}"
    return (f"position {t.position} token {t.text!r}: baseline {b:.1%} ({t.baseline_count}/{case.n_baseline}), "
            f"candidate {c:.1%} ({t.candidate_count}/{case.n_candidate}){target}")


def _params_label(case: CaseResult) -> str:
    """Short label of the case's parameters, e.g. ``T=0.7 top_k=20 len=8 batch=4``."""
    from speceq.core.params import SamplingParams
    from speceq.errors import SpeceqError

    spec = case.case if isinstance(case.case, dict) else {}
    try:
        label = SamplingParams(**spec.get("params", {})).label()
    except (TypeError, SpeceqError):
        label = str(spec.get("params", ""))
    batch = spec.get("batch_size")
    return f"{label} batch={batch}" if batch and batch != 1 else label


def _tv_line(case: CaseResult) -> str | None:
    """The TV estimate and the bound that decided, naming the certificate in force."""
    bound = bound_line(case)
    if case.tv_estimate is None:
        return bound
    return f"TV estimate {case.tv_estimate:.4f}; {bound}" if bound else f"TV estimate {case.tv_estimate:.4f}"


def explain_case(case: CaseResult, alpha: float, *, detail: bool = True) -> str:
    """The case's verdict line and, with ``detail``, the evidence behind it (indented)."""
    lines = [f"case {case.case_id!r} [{_params_label(case)}]: {case.verdict.upper()} — {case.reason}"]
    if not detail:
        return lines[0]
    case = with_token_text(case)  # tokens as text when the case names its tokenizer
    lines.append(f"  in short: {plain_case_summary(case, alpha)}")
    tests = rejecting_tests(case, alpha)
    if tests:
        lines.append(f"  rejecting tests (Holm-adjusted p <= alpha={alpha:g}):")
        for t in tests[:MAX_TESTS]:
            lines.append(f"    {t.name}: statistic {t.statistic:.4g}, p={_fmt_p(t.pvalue)}, "
                         f"Holm p={_fmt_p(t.adjusted_pvalue)}")
        if len(tests) > MAX_TESTS:
            lines.append(f"    ... {len(tests) - MAX_TESTS} more")
    for failure in case.hard_failures[:MAX_FAILURES]:
        lines.append(f"  hard failure: {failure}")
    moved = moved_tokens(case)
    if moved and case.verdict != Verdict.EQUIVALENT:
        lines.append("  tokens that moved most:")
        lines.extend(f"    {_token_line(t, case)}" for t in moved)
    if case.greedy is not None:
        g = case.greedy
        unexplained = f", {g.unexplained} unclassified (no oracle)" if g.unexplained else ""
        lines.append(f"  greedy: {g.rows_equal} of {g.rows_compared} row pairs equal; by their first divergence "
                     f"{g.mismatches} at a real mismatch, {g.near_ties} at a near-tie{unexplained}")
        for d in g.divergences[:MAX_FAILURES]:
            margin = "unknown" if d.margin is None else f"{d.margin:.3g} nats"
            base = f"{d.baseline_text} (#{d.baseline_token})" if d.baseline_text else f"#{d.baseline_token}"
            cand = f"{d.candidate_text} (#{d.candidate_token})" if d.candidate_text else f"#{d.candidate_token}"
            lines.append(f"    position {d.position}: baseline {base} vs candidate {cand}, "
                         f"top-2 margin {margin} -> {d.classification} (after {d.prefix_text[-30:]!r})")
    tv = _tv_line(case)
    if tv:
        lines.append(f"  {tv}")
    if case.verdict == Verdict.INCONCLUSIVE and case.required_n is not None:
        lines.append(f"  about {case.required_n} samples per engine would decide (now {case.n_baseline})")
    lines.extend(f"  note: {n}" for n in note_lines(case.notes, case_token_labels(case)))
    return "\n".join(lines)


def engines_line(result: RunResult) -> str:
    def name(role: str) -> str:
        d = result.engines.get(role, {})
        return str(d.get("name", role)) if isinstance(d, dict) else str(d)

    return f"candidate {name('candidate')!r} vs baseline {name('baseline')!r}"


def explain_run(result: RunResult, *, store: Path | None = None,
                only: Sequence[str] = (Verdict.SHIFTED, Verdict.INCONCLUSIVE)) -> str:
    """Explanation of a run: summary line, then every case (evidence for those in ``only``)."""
    lines = [f"speceq: {engines_line(result)}: {result.summary()}", f"in short: {plain_run_summary(result)}"]
    for case in result.cases:
        lines.append(explain_case(case, result.alpha, detail=case.verdict in only))
    lines.extend(f"note: {note}" for note in skipped_tests(result, face="pytest"))
    if store is not None:
        lines.append(f"samples and result.json: {store}  (HTML: speceq report {store / 'result.json'} -o report.html)")
    return "\n".join(lines)


def section_text(results: Sequence[tuple[RunResult, Path | None]], notes: Sequence[str] = (), *,
                 detail: bool = False) -> str:
    """Text of a test's ``speceq`` report section: every check of the test, then notes.

    Compact by default (a line per case: the failure message already holds the evidence);
    ``detail`` adds the evidence of every shifted or inconclusive case (for pytest-html).
    """
    only = (Verdict.SHIFTED, Verdict.INCONCLUSIVE) if detail else ()
    blocks = [explain_run(r, store=s, only=only) for r, s in results]
    blocks.extend(f"info: {n}" for n in notes)
    return "\n\n".join(blocks)
