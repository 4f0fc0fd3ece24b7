"""Sequential runs: grow every case's samples look by look and stop it once it is decided.

The schedule is fixed before any data and does not depend on the budget: slices end at the
points of :func:`speceq.stats.sequential.look_grid` (3, 4, 5, 6, 8, ... 1500, 1875, 2250,
2625, 3000, ... samples per engine: four steps per doubling); there is a look after every
slice, up to the first grid point >= the budget (at most 25 % past it). Slice i of a case is seeded by :func:`speceq.pipeline.plan.chunk_seed` of its index,
so the data at a look is always a prefix of the data at the next one, a rerun with a larger
budget extends the same sequence, and the chunks are stored (in ``<out>/sequential/``, apart
from fixed-size runs) and reused on a rerun.

At each look every undecided sampling case is decided by
:func:`speceq.verdicts.sequential.decide_look` (hard failure or an e-process at K / alpha:
``shifted``, or ``within-tolerance`` when the time-uniform TV bound is below the numerics tolerance;
time-uniform TV bound below the tolerance: ``equivalent``; else it goes on, and a case still open
at the budget is ``inconclusive``). Greedy cases are not sequential: they are
compared at the full budget as in a fixed-size run.

Slices are collected by the run's :class:`~speceq.pipeline.collect.collector.ChunkCollector`, the
path the fixed-size loop uses too (store, chunk identity, validation, progress, Ctrl-C).
The result has the same form as a fixed-size run's: :func:`speceq.verdicts.sequential.apply_sequential`
keeps the fixed-size tests on the collected rows as diagnostics (not primary), lists the
sequential tests as primary with their always-valid p-values, and the reason of a decided case
begins with ``sequential:``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from speceq.engines.base import SampleBatch
from speceq.inputs.cases import Case
from speceq.oracles.protocol import Oracle
from speceq.pipeline.analysis import look_support_failures, score_requests
from speceq.pipeline.collect.collector import ChunkCollector
from speceq.pipeline.config import RunConfig
from speceq.pipeline.control_arm import name_numerics
from speceq.pipeline.plan import ChunkPlan, concat_batches, plan_chunk
from speceq.pipeline.prepared import PreparedRun, analyse_rows
from speceq.pipeline.sequential.evidence import CaseSequentialEvidence, evaluate_case, planned_tests
from speceq.stats import sequential as seq
from speceq.stats.scores import TokenScores
from speceq.store import ROLES, SampleStore
from speceq.verdicts.evidence import SequentialEvidence, SequentialTestEvidence
from speceq.verdicts.failures import HardFailure
from speceq.verdicts.result import RunResult
from speceq.verdicts.sequential import SequentialDecision, apply_sequential, decide_look, sequential_outcomes

SCHEDULE = "sequential-doubling-v1"
STORE_SUBDIR = "sequential"
#: How look-slice seeds derive from the run seed (recorded in provenance).
SEED_DERIVATION = "speceq.pipeline.plan.chunk_seed(case seed or run_seed, role, case_id, look slice)"


def look_totals(samples: int) -> tuple[int, ...]:
    """Samples per engine at each look for a budget of ``samples``: the look grid up to its first point >= ``samples``.

    The last look may pass the budget by up to one grid step (at most 25 %, as from 1 500 to 1 875 for a
    budget of 1 501) so that it lies on the grid; the first look is at 3 samples.
    """
    grid = seq.look_grid(2 * samples + 6)
    return tuple(g for g in grid if g < samples) + (next(g for g in grid if g >= samples),)


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseProgress:
    """Where a case stands: verdict (None while open), looks taken, samples per engine."""

    case_id: str
    verdict: str | None
    looks: int
    n: int
    reason: str = ""
    evidence: CaseSequentialEvidence | None = None
    detected: bool = False  # an e-process decided it (no hard failure)


def _slice_plan(config: RunConfig, case: Case, role: str, index: int, n: int,
                ident: Mapping[str, Any]) -> ChunkPlan:
    return plan_chunk(config, case, role, index, n, ident, schedule=SCHEDULE)


def expected_slices(config: RunConfig, cases: Sequence[Case], ident: Mapping[str, Any],
                    sequential: Mapping[str, Any]) -> list[ChunkPlan]:
    """Every slice the run may collect, up to each case's last look (greedy cases: their one slice)."""
    chunks = []
    for case in cases:
        budget = case.samples or config.samples
        ends = look_totals(budget) if case.case_id in sequential else (budget,)
        for role in ROLES:
            chunks += [_slice_plan(config, case, role, i, end - start, ident)
                       for i, (start, end) in enumerate(zip((0, *ends[:-1]), ends))]
    return chunks


class _Slices:
    """Per case and role: the slices collected so far (through the run's collector) and their rows."""

    def __init__(self, prepared: PreparedRun, collector: ChunkCollector) -> None:
        self.prepared = prepared
        self.collector = collector
        self.batches: dict[tuple[str, str], list[SampleBatch]] = {}

    def extend(self, wanted: Sequence[tuple[Case, int, int]]) -> dict[str, dict[str, SampleBatch]]:
        """Add slice ``index`` (``n`` samples) of each (case, index, n) for both roles; new rows per case and role."""
        prepared = self.prepared
        chunks = [_slice_plan(prepared.config, case, role, index, n, prepared.described)
                  for case, index, n in wanted for role in ROLES]
        new: dict[str, dict[str, SampleBatch]] = {}
        for chunk, batch in zip(chunks, self.collector.gather(chunks)):
            self.batches.setdefault((chunk.role, chunk.case.case_id), []).append(batch)
            new.setdefault(chunk.case.case_id, {})[chunk.role] = batch
        return new

    def rows(self, role: str, case_id: str) -> SampleBatch:
        return concat_batches(self.batches[(role, case_id)])


def _scores(oracle: Oracle, case: Case, new_cand: SampleBatch, row_offset: int) -> TokenScores:
    s = oracle.score(case.prompts, new_cand, case.params)
    return dataclasses.replace(s, row=np.asarray(s.row) + row_offset)


class SequentialLoop:
    """Every sampling case look by look until its evidence decides it (see the module docstring)."""

    store_subdir = STORE_SUBDIR
    seed_derivation = SEED_DERIVATION
    extra_settings: Mapping[str, Any] = {"schedule": SCHEDULE}

    def first_round(self, config: RunConfig, cases: Sequence[Case]) -> int:
        """Chunks of the first round: one slice per case and engine."""
        return len(ROLES) * len(cases)

    def run(self, prepared: PreparedRun) -> RunResult:
        """Look by look, then the fixed-size analysis of the same rows as diagnostics; the merged result."""
        config, cases, oracle = prepared.config, prepared.cases, prepared.oracle
        sampling = [c for c in cases if not c.params.greedy]
        has_draft = oracle is not None and oracle.has_draft
        names = {c.case_id: planned_tests(c, oracle=oracle is not None, has_draft=has_draft,
                                          full_law=oracle is None or oracle.knows_full_law(c.params)) for c in sampling}
        k_tests = sum(len(v) for v in names.values())
        level = config.alpha / max(1, k_tests)
        collector = ChunkCollector(SampleStore(config.out_dir / STORE_SUBDIR), prepared.engines,
                                   lambda pending: prepared.session.executor(pending=pending),
                                   expected=expected_slices(config, cases, prepared.described, names),
                                   resume=config.resume, progress=config.progress, out_dir=config.out_dir,
                                   chunk_timeout=config.chunk_timeout)
        slices = _Slices(prepared, collector)
        with collector:
            progress = _run_cases(prepared, slices, names, level)
        provenance = prepared.completed({
            "chunks": {"reused": collector.reused, "sampled": collector.sampled,
                       "discarded_unreadable": list(collector.store.discarded)},
            "executor": prepared.session.description,  # the open parallel one, else serial
            "sequential": {"tests": k_tests, "level_per_test": level, "schedule": SCHEDULE,
                           "cases": {cid: {"verdict": p.verdict, "looks": p.looks, "n": p.n}
                                     for cid, p in progress.items()}}})
        base = {c.case_id: slices.rows("baseline", c.case_id) for c in cases}
        cand = {c.case_id: slices.rows("candidate", c.case_id) for c in cases}
        scorer = prepared.prefetch(score_requests(cases, base, cand))  # the diagnostics' scoring, on the workers too
        fixed = analyse_rows(prepared, base, cand, scorer, provenance)
        return name_numerics(apply_sequential(fixed, {cid: _decision(p, k_tests) for cid, p in progress.items()
                                                      if p.verdict is not None}, k_tests), sequential=True)


@dataclass(slots=True)
class _CaseState:
    """An open sampling case: its looks, scores so far and latest evidence."""

    case: Case
    names: list[str]
    totals: tuple[int, ...]
    score_parts: dict[str, list[TokenScores]] = dataclasses.field(default_factory=lambda: {r: [] for r in ROLES})
    rows_so_far: dict[str, int] = dataclasses.field(default_factory=lambda: {r: 0 for r in ROLES})
    prev: int = 0
    look: int = 0
    ev: CaseSequentialEvidence | None = None


def _run_cases(prepared: PreparedRun, slices: _Slices, names: Mapping[str, list[str]],
               level: float) -> dict[str, CaseProgress]:
    """Every case, look by look in lock step: each round samples the next slice of every open case at once.

    A case's data, scores and decisions depend only on its own seeded slices, so this gives the
    same verdicts, looks and samples as taking the cases one after another (tested), while an
    executor with worker processes samples (and scores) the open cases' slices side by side.
    """
    config, cases, oracle = prepared.config, prepared.cases, prepared.oracle
    progress: dict[str, CaseProgress] = {}
    wanted: list[tuple[Case, int, int]] = []
    states: list[_CaseState] = []
    for case in cases:
        budget = case.samples or config.samples
        if case.case_id not in names:  # greedy: the whole budget in one slice, decided by the fixed analysis
            wanted.append((case, 0, budget))
            progress[case.case_id] = CaseProgress(case_id=case.case_id, verdict=None, looks=1, n=budget)
            continue
        state = _CaseState(case=case, names=names[case.case_id], totals=look_totals(budget))
        states.append(state)
        wanted.append((case, 0, state.totals[0]))
    while wanted:
        new = slices.extend(wanted)
        scorer = oracle
        if oracle is not None and states:
            scorer = prepared.prefetch([(st.case.case_id, st.case.prompts, new[st.case.case_id][role], st.case.params)
                                        for st in states for role in ROLES])
        still_open = []
        for st in states:
            decided = _look(config, st, new[st.case.case_id], slices, scorer, level)
            if decided is not None:
                progress[st.case.case_id] = decided
                slices.collector.settle(st.case.case_id)
            else:
                still_open.append(st)
        states = still_open
        wanted = [(st.case, st.look, st.totals[st.look] - st.prev) for st in states]
    return {c.case_id: progress[c.case_id] for c in cases}


def _look(config: RunConfig, st: _CaseState, new: Mapping[str, SampleBatch], slices: _Slices,
          oracle: Oracle | None, level: float) -> CaseProgress | None:
    """One look at a case after its newest slice: its progress when decided (or out of budget), else None."""
    case = st.case
    st.look += 1
    total = st.totals[st.look - 1]
    st.prev = total
    scored: dict[str, TokenScores | None] = {r: None for r in ROLES}
    if oracle is not None:  # both engines' new rows, scored by the same oracle (the comparisons)
        for role in ROLES:
            st.score_parts[role].append(_scores(oracle, case, new[role], st.rows_so_far[role]))
            scored[role] = TokenScores.concatenate(st.score_parts[role])
    for role in ROLES:
        st.rows_so_far[role] += new[role].rows
    st.ev = ev = evaluate_case(case, slices.rows("baseline", case.case_id),
                               slices.rows("candidate", case.case_id), names=st.names, level=level,
                               alpha=config.alpha, scores=scored["candidate"], base_scores=scored["baseline"])
    budget = case.samples or config.samples
    failures: tuple[HardFailure, ...] = ()
    if oracle is not None and scored["candidate"] is not None and scored["baseline"] is not None:
        failures = look_support_failures(case, slices.rows("baseline", case.case_id), scored["baseline"],
                                         slices.rows("candidate", case.case_id), scored["candidate"],
                                         vocab_size=oracle.vocab_size, margin_nats=config.support_margin_nats)
    evidence = SequentialEvidence(
        hard_failures=failures,
        n=ev.n, look=st.look, looks=len(st.totals), budget=budget,
        tests=tuple(SequentialTestEvidence(name=t.name, max_evalue=t.max_evalue, pvalue=t.pvalue, crossing_sample=c,
                                           kind=ev.kinds[i] if i < len(ev.kinds) else None,
                                           prompt=ev.places[i][0] if i < len(ev.places) and ev.places[i] else None)
                    for i, (t, c) in enumerate(zip(ev.tests, ev.crossing_samples))),
        tv_upper_bound=None if ev.bound is None else ev.bound.upper,
        bound_grid_n=None if ev.bound is None else ev.bound.grid_n)
    verdict, reason = decide_look(evidence, tolerance=config.tolerance, threshold=1.0 / level,
                                  numerics_tolerance=config.numerics_tolerance)
    if verdict is None:
        return None
    n = budget if verdict == "inconclusive" else total
    return CaseProgress(case_id=case.case_id, verdict=verdict, looks=st.look, n=n, reason=reason, evidence=ev,
                        detected=verdict in ("shifted", "within-tolerance") and not failures)


def _decision(p: CaseProgress, k_tests: int) -> SequentialDecision:
    """A decided case's progress as the data :func:`~speceq.verdicts.sequential.apply_sequential` puts in force."""
    ev, bound = p.evidence, p.evidence.bound if p.evidence is not None else None
    return SequentialDecision(verdict=str(p.verdict), reason=p.reason, looks=p.looks, n=p.n,
                              tests=sequential_outcomes(ev.tests, k_tests, ev.kinds, ev.places) if ev is not None else (),
                              tv_estimate=None if bound is None else bound.tv,
                              tv_upper_bound=None if bound is None else bound.upper,
                              tv_reference=None if bound is None else f"time-uniform ({bound.reference})",
                              detected=p.detected)


def samples_used(result: RunResult) -> dict[str, int]:
    """Samples per engine each case used (its n when it stopped)."""
    return {c.case_id: int(min(c.n_baseline, c.n_candidate)) for c in result.cases}


__all__ = ["SCHEDULE", "STORE_SUBDIR", "CaseProgress", "SequentialLoop", "expected_slices", "look_totals",
           "samples_used"]
