"""The decisions of a sequential run (pure, no I/O): a case at one look, and the run's result.

At each look: a hard failure makes the case ``shifted``; so does any e-process that reached
the threshold K / alpha (K = sequential tests of the run: e-value Bonferroni, family-wise
error <= alpha however often one looks), unless it is ``within-tolerance`` (the time-uniform TV
upper bound, valid at every look at once, below the numerics tolerance, every crossed e-process
one that bound stands for); else it is ``equivalent`` when the time-uniform TV
upper bound is below the tolerance; else it stays open, and at its last look it is
``inconclusive``. The reason of every decided case begins with ``sequential:``.
:func:`apply_sequential` puts those decisions into the run's result (the sequential loop
decides nothing itself).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from speceq.stats.results import Effect
from speceq.stats.sequential import EProcessResult
from speceq.verdicts.evidence import CERTIFIES, SequentialEvidence
from speceq.verdicts.kinds import EffectName, TestKind, named_effect
from speceq.verdicts.notes import Note, NoteKind
from speceq.verdicts.reasons import failure_lines, note_line, time_uniform_bound_words, time_uniform_size_words
from speceq.verdicts.result import CaseResult, RunResult, TestOutcome
from speceq.verdicts.verdict import Verdict

__all__ = ["SEQUENTIAL_SIZED_KINDS", "SequentialDecision", "apply_sequential", "decide_look", "eprocess_effect", "sequential_outcomes"]


#: Sequential tests whose rejection the time-uniform TV bound can stand for, as :data:`speceq.verdicts.decide.SIZED_KINDS`
#: in a fixed-size run: the pair e-processes of one position's token (of the case's prompt: the bound is that
#: prompt's) and of the lengths, and the row-score comparisons. Not the joint pair e-process of the first two
#: tokens: the time-uniform bound is per position.
SEQUENTIAL_SIZED_KINDS = frozenset({
    TestKind.SEQ_PAIR_POSITION, TestKind.SEQ_PAIR_LENGTH, TestKind.SEQ_ARGMAX_COMPARISON,
    TestKind.SEQ_LOG_LIKELIHOOD_COMPARISON, TestKind.SEQ_PIT_COMPARISON, TestKind.SEQ_DRAFT_RATIO_COMPARISON,
    TestKind.SEQ_DRAFT_LOG_RATIO_COMPARISON, TestKind.SEQ_SUPPORT_COMPARISON,
})


def decide_look(ev: SequentialEvidence, *, tolerance: float, threshold: float,
                numerics_tolerance: float = 0.0) -> tuple[str | None, str]:
    """(verdict, reason) of a case after look ``ev.look``; verdict None while the case stays open.

    A crossing e-process is ``within-tolerance`` instead of ``shifted`` when ``numerics_tolerance`` > 0, no hard
    failure occurred, every crossed e-process is one of :data:`SEQUENTIAL_SIZED_KINDS` and the time-uniform TV
    upper bound is below ``numerics_tolerance``: that bound holds at every look at once, so also at the look the
    crossing chose (a fixed-size interval would not).
    """
    at = f"decided at n = {ev.n} samples per engine after {ev.look} look{'s' if ev.look > 1 else ''}"
    if ev.hard_failures:
        return "shifted", f"sequential: {at}; hard failure: {failure_lines(ev.hard_failures)[0]}"
    crossed = [t for t in ev.tests if t.crossing_sample is not None]
    if crossed:
        t = min(crossed, key=lambda x: x.crossing_sample)  # type: ignore[arg-type, return-value]
        detected = (f"{t.name} e-value {t.max_evalue:.3g} >= {threshold:.3g} (K/alpha; always-valid p = {t.pvalue:.3g}), "
                    f"first crossed at sample {t.crossing_sample}")
        size = time_uniform_size_words(ev.tv_upper_bound, ev.bound_grid_n)
        bound = ev.tv_upper_bound
        if numerics_tolerance > 0.0:
            unsized = sorted({x.name for x in crossed if x.kind not in SEQUENTIAL_SIZED_KINDS or x.prompt not in (None, 0)})
            if bound is not None and bound < numerics_tolerance and not unsized:
                return "within-tolerance", (
                    f"sequential: {at}; a difference is detected ({detected}) but its size is certified below the "
                    f"numerics tolerance: {time_uniform_bound_words(bound, ev.bound_grid_n)} < {numerics_tolerance:g}, "
                    "a bound that holds at every look at once, so at the one the crossing chose")
            why = (f"the time-uniform bound does not stand for {', '.join(unsized)}" if unsized else
                   "no time-uniform TV bound yet" if bound is None else "the time-uniform bound is not below it")
            size += f" (not within the numerics tolerance {numerics_tolerance:g}: {why})"
        return "shifted", f"sequential: {at}; {detected}; {size}"
    if ev.tv_upper_bound is not None and ev.tv_upper_bound < tolerance:
        return "equivalent", (f"sequential: {at}; no e-process reached {threshold:.3g} and the time-uniform TV upper "
                              f"bound {ev.tv_upper_bound:.4f} < tolerance {tolerance:g} (data up to grid point "
                              f"n = {ev.bound_grid_n}); this {CERTIFIES}")
    if ev.look < ev.looks:
        return None, ""
    bound = "no time-uniform TV bound yet" if ev.tv_upper_bound is None else (
        f"the time-uniform TV upper bound {ev.tv_upper_bound:.4f} >= tolerance {tolerance:g}")
    return "inconclusive", (
        f"sequential: undecided at the budget n = {ev.budget} after {ev.looks} looks: no e-process reached "
        f"{threshold:.3g} and {bound}; rerun with a larger --samples (same --out and seed) to continue the "
        "same sequence, which stays valid")


@dataclass(frozen=True, slots=True, kw_only=True)
class SequentialDecision:
    """A sequential case decided by :func:`decide_look`: its verdict and reason, looks, samples per engine,
    its primary tests (:func:`sequential_outcomes`) and its time-uniform TV bound (None: none yet). detected: an
    e-process decided it (``shifted`` or ``within-tolerance`` without a hard failure), so its reason names an
    engine whose row independence could not be tested: the e-processes assume independent rows too."""

    verdict: str
    reason: str
    looks: int
    n: int
    tests: tuple[TestOutcome, ...] = ()
    tv_estimate: float | None = None
    tv_upper_bound: float | None = None
    tv_reference: str | None = None
    detected: bool = False


def sequential_outcomes(tests: Sequence[EProcessResult], k_tests: int, kinds: Sequence[TestKind] = (),
                        places: Sequence[tuple[int, int] | None] = ()) -> tuple[TestOutcome, ...]:
    """The e-processes of a case as primary tests, adjusted by e-value Bonferroni over the run's ``k_tests``.

    kinds / places: per test, its kind and the (prompt, position) of a one-position test (None: not one;
    empty: not known, the outcomes then carry neither). Each outcome's effect is :func:`eprocess_effect`'s.
    """
    out = []
    for i, t in enumerate(tests):
        kind = kinds[i] if i < len(kinds) else None
        place = places[i] if i < len(places) else None
        out.append(TestOutcome(name=t.name, family="sequential", primary=True, statistic=t.statistic, pvalue=t.pvalue,
                               n=t.n, adjusted_pvalue=min(1.0, t.pvalue * k_tests), summary=t.summary(), kind=kind,
                               effect=None if kind is None else eprocess_effect(kind, t),
                               prompt=None if place is None else place[0],
                               position=None if place is None else place[1]))
    return tuple(out)


def eprocess_effect(kind: TestKind, result: EProcessResult) -> Effect | None:
    """The effect of a sequential test: the plug-in estimate so far of what its e-process bets on, with no interval.

    A paired exchangeability e-process (``seq pair ...``): the plug-in TV between the two engines' samples; a
    paired sign e-process (``seq ... comparison``): the mean row score difference, candidate minus baseline (the
    share of rows holding a token of oracle probability 0, for the support one). low / high / level are None: a
    fixed-n interval is not valid at a look chosen by the data, and no confidence sequence is computed per test
    (the case's time-uniform TV bound, ``tv_upper_bound``, is the interval that holds at every look). None
    before any observation.
    """
    if result.effect is None or not kind.is_eprocess:
        return None
    if kind.is_pair_eprocess:
        return named_effect(EffectName.TV, result.effect)
    if kind is TestKind.SEQ_SUPPORT_COMPARISON:
        return named_effect(EffectName.ROW_RATE_DIFFERENCE, result.effect)
    return named_effect(EffectName.ROW_SCORE_DIFFERENCE, result.effect)


def apply_sequential(fixed: RunResult, decisions: Mapping[str, SequentialDecision], k_tests: int) -> RunResult:
    """The run's result: the fixed-size analysis of the same rows, with each sequential case's decision in force.

    A case in ``decisions`` takes its sequential verdict, reason, tests and bound; its fixed-size
    tests stay as diagnostics (not primary), with a note of what they would have said, and its fixed-size
    ``size`` is dropped (its interval holds at a sample size fixed in advance, not at the look the data chose;
    the reason gives the time-uniform bound instead). When an e-process decided it, the reason names every engine
    whose row independence could not be tested on the rows (``independence untested`` notes). A case
    not in it (greedy: not sequential) keeps the fixed-size decision. The run takes the worst.
    """
    cases: list[CaseResult] = []
    for c in fixed.cases:
        d = decisions.get(c.case_id)
        if d is None:
            cases.append(c)
            continue
        diag = tuple(dataclasses.replace(t, primary=False, adjusted_pvalue=None) for t in c.tests)
        extra: dict[str, Any] = {}
        if d.tv_upper_bound is not None:
            extra = {"tv_estimate": d.tv_estimate, "tv_upper_bound": d.tv_upper_bound, "tv_reference": d.tv_reference}
        note = Note(kind=NoteKind.FIXED_SIZE_VERDICT, values={"verdict": str(c.verdict),
                                                              "tv_upper_bound": c.tv_upper_bound})
        untested = "".join(f"; {note_line(n)}" for n in c.notes if n.kind is NoteKind.INDEPENDENCE_UNTESTED) \
            if d.detected else ""
        cases.append(dataclasses.replace(c, verdict=d.verdict, reason=d.reason + untested, tests=d.tests + diag,
                                         required_n=None,
                                         min_detectable_tv=None,  # the fixed-size chi-square's, not the e-processes'
                                         size=None,  # a fixed-size interval does not hold at a look the data chose
                                         notes=(*c.notes, note), **extra))
    notes = (*fixed.notes, Note(kind=NoteKind.SEQUENTIAL_MODE, values={"tests": int(k_tests)}))
    # the fixed analysis's pooled tests looked at rows chosen along the way: shown, never deciding
    pooled = tuple(dataclasses.replace(t, primary=False, adjusted_pvalue=None) for t in fixed.pooled_tests)
    return dataclasses.replace(fixed, verdict=Verdict.worst(c.verdict for c in cases), cases=tuple(cases), notes=notes,
                               pooled_tests=pooled, pooled_reason="")
