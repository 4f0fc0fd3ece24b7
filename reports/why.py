"""The "Why shifted" block of a case card: the deciding test (or hard failure), one sentence on
what it means for the engine, and the picture of that test.

Pictures by test: a martingale z-test's running sum against its Holm null band; the PIT
histogram; token bars at a position; the stored bins of any other chi-square test.
"""

from __future__ import annotations

from dataclasses import dataclass

from markupsafe import Markup
from scipy import stats

from speceq.reports import svg
from speceq.reports.format import fmt_p
from speceq.verdicts import reasons
from speceq.verdicts.decide import first_step_levels
from speceq.verdicts.result import CaseResult, RunResult, TestOutcome, TokenFrequency
from speceq.verdicts.verdict import Verdict

#: Pointwise coverage of the uniform band drawn on PIT histograms (the report's PIT section uses it too).
PIT_BAND_LEVEL = 0.99
#: The candidate's one-sample diagnostic drawn for each oracle comparison.
COMPARISON_PATHS = {"argmax comparison": "z argmax leak", "log-likelihood comparison": "z temperature drift",
                    "draft ratio comparison": "z draft ratio", "draft log-ratio comparison": "z draft drift"}


@dataclass(frozen=True, slots=True)
class Decider:
    """What made a case shifted: a test (with its picture) or a hard failure."""

    title: str  # the test's name or "hard failure"
    detail: str  # adjusted p and effect, one line
    meaning: str  # one sentence on what it says about the candidate engine
    picture: Markup | None
    caption: str


@dataclass(frozen=True, slots=True)
class ZView:
    chart: Markup
    test: str
    z_crit: float
    level: str
    statistic: float | None
    adjusted_pvalue: float | None
    decides: bool


def holm_level(test: TestOutcome, run: RunResult) -> float:
    """The level the run's (weighted) Holm compares ``test``'s raw p with at the step it reaches it.

    Every primary test u of the run, the cases' and the pooled ones, has its first-step level
    l_u (:func:`speceq.verdicts.decide.first_step_levels`; plain Holm: alpha / m); ``test`` is
    reached once those with a smaller p_u / l_u are rejected, and is compared at
    alpha l_t / (sum of l_u over the rest). Plain Holm gives alpha / (m - r), r tests with a smaller p.
    """
    case_tests = [t for c in run.cases for t in c.tests if t.primary]
    pooled = [t for t in run.pooled_tests if t.primary]
    case_level, pooled_level = first_step_levels(run.alpha, len(case_tests), len(pooled))
    levels = [(t.pvalue, case_level) for t in case_tests] + [(t.pvalue, pooled_level) for t in pooled]
    own = pooled_level if any(t is test for t in pooled) else case_level
    rest = sum(level for p, level in levels if not p / level < test.pvalue / own)
    return run.alpha * own / rest if rest > 0 else run.alpha


def z_views(case: CaseResult, run: RunResult, deciding: TestOutcome | None) -> list[ZView]:
    tests = {t.name: t for t in case.tests}
    views = []
    for path in case.z_paths:
        if not path.tokens:
            continue
        t = tests.get(path.test)
        level = holm_level(t, run) if t is not None and t.primary else run.alpha
        z_crit = float(stats.norm.isf(level / 2))
        label = f"Holm level {level:.2g}" if t is not None and t.primary else f"level α = {run.alpha:g}"
        views.append(ZView(chart=svg.zpath_chart(path, z_crit, level_label=label), test=path.test, z_crit=z_crit,
                           level=label, statistic=None if t is None else t.statistic,
                           adjusted_pvalue=None if t is None else t.adjusted_pvalue,
                           decides=deciding is not None and deciding.name == path.test))
    return views


def _bins_chart(case: CaseResult, name: str) -> Markup | None:
    for b in case.test_bins:
        if b.test == name and b.labels:
            toks = [TokenFrequency(position=0, token=i, text=label, baseline_count=a, candidate_count=c)
                    for i, (label, a, c) in enumerate(zip(b.labels, b.baseline_counts, b.candidate_counts))]
            return svg.frequency_chart(toks, b.n_baseline, b.n_candidate, labels=list(b.labels),
                                       title=f"{name}: the bins that differ most, baseline vs candidate")
    return None


def _position_chart(case: CaseResult, position: int) -> Markup | None:
    toks = sorted((t for t in case.top_tokens if t.position == position),
                  key=lambda t: (-(t.baseline_count + t.candidate_count), t.token))
    return svg.frequency_chart(toks, case.n_baseline, case.n_candidate) if toks else None


def decider(case: CaseResult, run: RunResult, deciding: TestOutcome | None, z_views: list[ZView]) -> Decider | None:
    """The test (or hard failure) that made ``case`` shifted, with the picture of it."""
    if case.verdict != Verdict.SHIFTED:
        return None
    engine = reasons.engine_label(run, "candidate")
    why = reasons.meaning(case, run.alpha, engine)
    if case.hard_failures:
        also = reasons.deciding_test(case, run.alpha)
        note = ("A hard failure needs no statistics: the event is impossible under equivalence. "
                + ("The greedy comparison below lists the divergences. " if case.greedy is not None else ""))
        picture, caption = _test_picture(case, also, z_views) if also is not None else (None, "")
        if also is not None:
            note += (f"The tests agree: {also.name} rejects too (Holm-adjusted p = {fmt_p(also.adjusted_pvalue)}). "
                     + caption)
        return Decider("hard failure", reasons.decided_by(case, run.alpha), why, picture, note.strip())
    if deciding is None:
        return Decider("decision", case.reason, why, None, "")
    picture, caption = _test_picture(case, deciding, z_views)
    detail = f"Holm-adjusted p = {fmt_p(deciding.adjusted_pvalue)} ≤ α = {run.alpha:g}; {reasons.effect(deciding)}"
    return Decider(deciding.name, detail, why, picture, caption)


def _test_picture(case: CaseResult, deciding: TestOutcome, z_views: list[ZView]) -> tuple[Markup | None, str]:
    """The picture of one test and its caption (None and a sentence when the result holds no data for it)."""
    name = deciding.name
    picture, caption = None, ""
    zv = next((z for z in z_views if z.test == name), None)
    shown = COMPARISON_PATHS.get(name)
    cv = next((z for z in z_views if z.test == shown), None) if shown else None
    if cv is not None:
        picture = cv.chart
        caption = (f"The decision compares the candidate's row scores with the baseline's (both scored by the oracle). "
                   f"Drawn: the candidate's own running sum of f − E f ({shown}, a one-sample diagnostic whose band "
                   "assumes an exact oracle), to show where the excess builds up.")
    elif zv is not None:
        picture = zv.chart
        caption = (f"Running sum of f − E f over the candidate's tokens (orange) inside its null band ±{zv.z_crit:.3g}·sd "
                   f"({zv.level}). The test looks at the end of the path only: it rejects because the path ends outside "
                   "the band.")
    elif name.startswith("PIT") and case.pit_histogram and sum(case.pit_histogram) > 0:
        band = svg.pit_band(case.pit_histogram, PIT_BAND_LEVEL)
        picture = svg.pit_histogram(case.pit_histogram, band)
        caption = (f"PIT values of the candidate's tokens; uniform under an exact oracle. {band.outside} of {band.bins} "
                   f"bins lie outside the {round(PIT_BAND_LEVEL * 100)} % band (red)."
                   + (" The decision compares the candidate's mean PIT per row with the baseline's."
                      if name.endswith(" comparison") else ""))
    elif name == "chi2 GOF first token" or (deciding.position is not None and deciding.prompt in (None, 0) and any(
            t.position == deciding.position for t in case.top_tokens)):
        position = 0 if name == "chi2 GOF first token" else int(deciding.position)  # type: ignore[arg-type]
        picture = _position_chart(case, position)
        caption = (f"Token frequencies at position {position} of the case's prompt (black ticks: the oracle's "
                   "probability); bold ▲▼ marks the tokens that moved most.")
    if picture is None:
        picture = _bins_chart(case, name)
        caption = "The bins of this test that differ most between the engines (share of each engine's samples)."
    if picture is not None and name == "support comparison":
        caption = ("Rows holding a token the processed target gives probability 0, baseline against candidate "
                   "(share of each engine's rows).")
    if picture is None and name.endswith(" comparison"):
        caption = ("A comparison of the two engines' row scores, both scored by the oracle (the counts are in the "
                   "evidence table); it has no picture of its own.")
    elif picture is None:
        caption = "No picture of this test is stored in the result (it was written by an older speceq)."
    return picture, caption


