"""Result objects of a run: frozen, JSON round-trippable, convertible to pandas.

These are the format every face reads: the CLI's table, the pytest plugin's report
section, the HTML report (which renders a saved ``result.json``) and the DataFrame.
Numbers are plain Python floats/ints (``None`` when not applicable) so that
``RunResult.from_dict(json.loads(r.to_json())) == r``.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from speceq.stats.results import Effect
from speceq.verdicts.failures import HardFailure
from speceq.verdicts.kinds import TestKind
from speceq.verdicts.notes import Note, notes_from_saved
from speceq.verdicts.numerics_drift import NumericsControl
from speceq.verdicts.verdict import RUN_VERDICTS, Verdict

#: The ``case_id`` of the run-level pooled tests in :meth:`RunResult.to_dataframe` (no case has it: ids are
#: names a cases file gives, and this one has spaces and parentheses).
POOLED_CASE_ID = "(pooled over cases)"


@dataclass(frozen=True, slots=True, kw_only=True)
class TestOutcome:
    """One statistical test of a case, as it enters the decision.

    name: e.g. ``"chi2 position 0"``, ``"PIT Anderson-Darling"``, ``"z argmax leak"``.
    family: ``"two-sample"``, ``"oracle"`` or ``"sequence"``.
    primary: whether it is one of the primary tests fixed before the data (Holm family).
    adjusted_pvalue: Holm-adjusted over every primary test of the run, the pooled ones included
    (weighted: :func:`speceq.verdicts.decide.first_step_levels`; primary only).
    qvalue: Benjamini-Hochberg q-value over every test of the run (diagnostic).
    prompt / position: for a test of one generated position (``chi2 prompt j position t``),
    which prompt of the batch and which position, so that faces never parse the name back.
    kind: what test it is (None in results written before kinds were stored). effect: its effect
    size with a confidence interval, in its own units (None when the test has none, or in older results);
    faces word the effect from these fields, never from ``summary``.
    """

    __test__ = False  # not a pytest test class, despite the name

    name: str
    family: str
    primary: bool
    statistic: float
    pvalue: float
    dof: float | None = None
    n: int | None = None
    adjusted_pvalue: float | None = None
    qvalue: float | None = None
    summary: str = ""
    prompt: int | None = None
    position: int | None = None
    kind: TestKind | None = None
    effect: Effect | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TestOutcome:
        """The outcome of ``to_dict`` / ``result.json`` (older files without ``kind`` or ``effect`` read as None)."""
        kind, effect = d.get("kind"), d.get("effect")
        return cls(**{**d, "kind": None if kind is None else TestKind(kind),
                      "effect": None if effect is None else Effect(**effect)})


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenFrequency:
    """Counts of one token at one position, for the frequency bars."""

    position: int
    token: int
    text: str
    baseline_count: int
    candidate_count: int
    oracle_prob: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GreedyDivergence:
    """First divergence of a greedy row pair.

    margin: the target's top-1 minus top-2 log-probability at that prefix (nats).
    classification: ``"near-tie"`` when margin <= the near-tie threshold, else ``"mismatch"``.
    rows: row pairs sharing this first divergence; prefix_ids: the prompt's ids then the tokens
    both rows share before ``position`` (empty in older results); prefix_text: its last characters decoded.
    baseline_text / candidate_text: the two tokens as text, made by a face from the case's tokenizer
    (:func:`speceq.verdicts.reasons.with_token_text`; empty when it is not known).
    """

    prompt_index: int
    position: int
    baseline_token: int
    candidate_token: int
    margin: float | None
    classification: str
    prefix_text: str = ""
    rows: int = 0
    prefix_ids: tuple[int, ...] = ()
    baseline_text: str = ""
    candidate_text: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class GreedySummary:
    """Greedy row comparison of a case over every prompt of its batch.

    divergences: the distinct first divergences SHOWN (mismatches first, capped); every
    diverging row is classified and counted in mismatches / near_ties / unexplained (by its first
    divergence); distinct_divergences: how many distinct first divergences there were in all.
    rows_beyond_near_tie: row pairs whose first divergence is a mismatch or whose candidate row,
    teacher-forced through the oracle, leaves the target's argmax path later beyond a near-tie (the
    numerator of a shifted greedy case's ``size``; 0 in older results).
    """

    rows_compared: int
    rows_equal: int
    near_tie_threshold: float
    divergences: tuple[GreedyDivergence, ...] = ()
    mismatches: int = 0
    near_ties: int = 0
    unexplained: int = 0
    distinct_divergences: int = 0
    rows_beyond_near_tie: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class SampleText:
    engine: str  # "baseline" | "candidate"
    prompt_index: int
    text: str
    token_ids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ZPath:
    """Running sums of one martingale z-test over the candidate's scored tokens, thinned for a plot.

    test: the name of its TestOutcome (e.g. ``"z draft drift"``). tokens: tokens summed at
    each point (increasing; the last is every token the test used). excess: running sum of
    f - E_p f there (f's units). variance: running sum of Var_p f there. The test's Z is
    ``excess[-1] / sqrt(variance[-1])``.
    """

    test: str
    tokens: tuple[int, ...] = ()
    excess: tuple[float, ...] = ()
    variance: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class TestBins:
    """The bins of a primary chi-square test whose raw p-value is at most alpha (so it may decide).

    labels: display text per bin; counts per engine; the bins are those with the largest
    chi-square contributions (at most a dozen), ordered by pooled count. tokens: per bin, the token ids
    it stands for (one for a position's token, two for a pair; the end symbol is
    ``speceq.stats.counts.END``; empty for a bin of no token, such as a length), so that a face labels them with the case's tokenizer; empty in older results.
    """

    __test__ = False  # not a pytest test class, despite the name

    test: str
    labels: tuple[str, ...] = ()
    baseline_counts: tuple[int, ...] = ()
    candidate_counts: tuple[int, ...] = ()
    n_baseline: int = 0
    n_candidate: int = 0
    tokens: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseResult:
    """Verdict and evidence of one case."""

    case_id: str
    case: dict[str, Any]
    verdict: Verdict  # a plain word read back from JSON compares equal to its member
    reason: str
    tolerance: float
    n_baseline: int
    n_candidate: int
    tests: tuple[TestOutcome, ...] = ()
    tv_estimate: float | None = None  # None for a greedy case: the share of row pairs that differ is not a TV
    tv_upper_bound: float | None = None
    tv_reference: str = "two-sample"  # or "oracle (position 0) and two-sample", "greedy rows"
    required_n: int | None = None
    min_detectable_tv: float | None = None  # smallest TV shift the chi-square detects with power 0.9 at this n
    rerun_command: str | None = None
    candidate_tokens: int = 0
    acceptance_rate: float | None = None
    baseline_tokens_per_s: float | None = None
    candidate_tokens_per_s: float | None = None
    speedup_per_token: float | None = None
    top_tokens: tuple[TokenFrequency, ...] = ()
    pit_histogram: tuple[int, ...] = ()
    greedy: GreedySummary | None = None
    samples: tuple[SampleText, ...] = ()
    hard_failures: tuple[str, ...] = ()  # the failures below in words (speceq.verdicts.reasons.failure_lines)
    failures: tuple[HardFailure, ...] = ()  # what happened, with token ids (empty in older results)
    notes: tuple[Note, ...] = ()  # records, worded by speceq.verdicts.reasons.note_lines (older results: text notes)
    z_paths: tuple[ZPath, ...] = ()
    test_bins: tuple[TestBins, ...] = ()
    certificate: str = "tv"  # what an equivalent verdict of this case rests on: "tv" or "pit-law" (the run's --certificate)
    pit_law_upper_bound: float | None = None  # the PIT-law bound (speceq.stats.pit_law) when the oracle gave one
    #: how large the difference is: the largest TV of the prompt's per-position and first-two-token laws, held-out estimate and [low, high]
    #: (speceq.stats.max_tv_size), on every shifted and within-tolerance sampling case of a fixed-size run; a shifted greedy case's: the
    #: share of its row pairs diverging beyond a near-tie with its Clopper-Pearson interval (None otherwise and in older results)
    size: Effect | None = None

    @property
    def decisive_bound(self) -> float | None:
        """The upper bound the verdict compares with the tolerance: the PIT-law bound of a sampling case under
        ``certificate="pit-law"``, else the TV bound (greedy cases: the row-mismatch bound)."""
        if self.certificate == "pit-law" and self.greedy is None:
            return self.pit_law_upper_bound
        return self.tv_upper_bound

    def summary(self) -> str:
        """One line: id, verdict, reason."""
        return f"{self.case_id}: {self.verdict.upper()} — {self.reason}"


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult:
    """All cases of one run, with the settings and provenance that produced them."""

    verdict: Verdict
    alpha: float
    tolerance: float
    seed: int
    engines: dict[str, Any]
    cases: tuple[CaseResult, ...]
    oracle: dict[str, Any] | None = None
    provenance: dict[str, Any] = field(default_factory=dict)
    notes: tuple[Note, ...] = ()  # records, worded by speceq.verdicts.reasons.note_lines (older results: text notes)
    pooled_tests: tuple[TestOutcome, ...] = ()
    pooled_reason: str = ""
    certificate: str = "tv"  # what an equivalent verdict certifies (--certificate): "tv" or "pit-law"
    #: TV below which a detected difference is ``within-tolerance`` (--numerics-tolerance; 0: off, None: older results)
    numerics_tolerance: float | None = None
    #: the numerics control's finding (--numerics-control): control against baseline per case; None without one
    numerics_control: NumericsControl | None = None

    @property
    def exit_code(self) -> int:
        return Verdict.parse(self.verdict).exit_code

    def summary(self) -> str:
        """One line: the run verdict, its cases' verdicts and, when one decided, the pooled test's reason."""
        counts = {v: sum(c.verdict == v for c in self.cases) for v in RUN_VERDICTS}
        parts = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
        pooled = f"; {self.pooled_reason}" if self.pooled_reason else ""
        rule = (f"certificate pit-law, PIT-law bound<{self.tolerance:g}" if self.certificate == "pit-law"
                else f"tolerance TV<{self.tolerance:g}")
        if self.numerics_tolerance:
            rule += f", numerics tolerance TV<{self.numerics_tolerance:g}"
        against = "; candidate against the numerics control" if self.numerics_control is not None else ""
        return f"run verdict {self.verdict.upper()} ({parts}; alpha={self.alpha:g}, {rule}{against}){pooled}"

    def to_dict(self) -> dict[str, Any]:
        """Plain data (verdicts as their words), for JSON and for pickling across processes."""
        return dataclasses.asdict(self, dict_factory=_plain_dict)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=True, allow_nan=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunResult:
        cases = tuple(_case_from_dict(c) for c in d["cases"])
        pooled = tuple(TestOutcome.from_dict(t) for t in d.get("pooled_tests", ()))
        control = d.get("numerics_control")
        return cls(**{**d, "cases": cases, "notes": notes_from_saved(d.get("notes")), "pooled_tests": pooled,
                      "numerics_control": None if control is None else NumericsControl.from_dict(control)})

    @classmethod
    def from_json(cls, text: str) -> RunResult:
        return cls.from_dict(json.loads(text))

    def to_dataframe(self) -> Any:
        """One row per (case, test): case id, verdict, test name, its kind, statistic, p, Holm p, q, the case's TV,
        and the test's effect (:data:`EFFECT_COLUMNS`: what is measured, estimate, interval, its level and unit;
        None where the test has none, e.g. a uniformity statistic, or in results written before effects were stored).
        A case without tests has one row of its own columns."""
        import pandas as pd

        rows = []
        for c in self.cases:
            base = {
                "case_id": c.case_id,
                "verdict": c.verdict,
                "tv_estimate": c.tv_estimate,
                "tv_upper_bound": c.tv_upper_bound,
                "pit_law_upper_bound": c.pit_law_upper_bound,
                "required_n": c.required_n,
                "n_baseline": c.n_baseline,
                "n_candidate": c.n_candidate,
                "acceptance_rate": c.acceptance_rate,
            }
            if not c.tests:
                rows.append(base)
            for t in c.tests:
                rows.append({**base, **_test_columns(t)})
        for t in self.pooled_tests:  # run-level tests: no case of their own
            rows.append({"case_id": POOLED_CASE_ID, "verdict": self.verdict if t.adjusted_pvalue is not None
                         and t.adjusted_pvalue <= self.alpha else None, **_test_columns(t)})
        return pd.DataFrame(rows)


#: The effect columns of :meth:`RunResult.to_dataframe`, one per field of :class:`speceq.stats.results.Effect`.
EFFECT_COLUMNS = ("effect", "effect_estimate", "effect_low", "effect_high", "effect_level", "effect_unit")


def _test_columns(t: TestOutcome) -> dict[str, Any]:
    """A test's columns of :meth:`RunResult.to_dataframe` (kind as its stored word; effect fields None without one)."""
    e = t.effect
    effect = (None,) * len(EFFECT_COLUMNS) if e is None else (e.name, e.estimate, e.low, e.high, e.level, e.unit)
    return {"test": t.name, "kind": None if t.kind is None else str(t.kind), "family": t.family, "primary": t.primary,
            "statistic": t.statistic, "pvalue": t.pvalue, "adjusted_pvalue": t.adjusted_pvalue, "qvalue": t.qvalue,
            **dict(zip(EFFECT_COLUMNS, effect))}


def _plain_dict(items: list[tuple[str, Any]]) -> dict[str, Any]:
    return {k: str(v) if isinstance(v, Verdict) else v for k, v in items}


def _case_from_dict(d: dict[str, Any]) -> CaseResult:
    g = d.get("greedy")
    greedy = None
    if g is not None:
        greedy = GreedySummary(**{**g, "divergences": tuple(
            GreedyDivergence(**{**x, "prefix_ids": tuple(x.get("prefix_ids", ()))}) for x in g["divergences"])})
    return CaseResult(
        **{
            **d,
            "tests": tuple(TestOutcome.from_dict(t) for t in d.get("tests", ())),
            "top_tokens": tuple(TokenFrequency(**t) for t in d.get("top_tokens", ())),
            "pit_histogram": tuple(d.get("pit_histogram", ())),
            "greedy": greedy,
            "samples": tuple(SampleText(**{**s, "token_ids": tuple(s.get("token_ids", ()))}) for s in d.get("samples", ())),
            "hard_failures": tuple(d.get("hard_failures", ())),
            "failures": tuple(HardFailure.from_dict(f) for f in d.get("failures", ())),
            "notes": notes_from_saved(d.get("notes")),
            "size": None if d.get("size") is None else Effect(**d["size"]),
            "z_paths": tuple(ZPath(**{k: tuple(v) if isinstance(v, list) else v for k, v in z.items()})
                             for z in d.get("z_paths", ())),
            "test_bins": tuple(TestBins(**{**{k: tuple(v) if isinstance(v, list) else v for k, v in b.items()},
                                           "tokens": tuple(tuple(t) for t in b.get("tokens", ()))})
                               for b in d.get("test_bins", ())),
        }
    )
