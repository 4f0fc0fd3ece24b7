"""Sequential runs: grow every case's samples look by look and stop it once it is decided.

The schedule is fixed before any data and does not depend on the budget: slices end at the
points of :func:`speceq.stats.sequential.look_grid` (3, 4, 5, 6, 8, ... 1500, 1875, 2250,
2625, 3000, ... samples per engine: four steps per doubling); there is a look after every
slice, up to the first grid point >= the budget (at most 12.5 % past it). Slice i of a case is seeded by :func:`speceq.pipeline.plan.chunk_seed` of its index,
so the data at a look is always a prefix of the data at the next one, a rerun with a larger
budget extends the same sequence, and the chunks are stored (in ``<out>/sequential/``, apart
from fixed-size runs) and reused on a rerun.

At each look every undecided sampling case is decided by
:func:`speceq.verdicts.sequential.decide_look` (hard failure or an e-process at K / alpha:
``shifted``; time-uniform TV bound below the tolerance: ``equivalent``; else it goes on, and a
case still open at the budget is ``inconclusive``). Greedy cases are not sequential: they are
compared at the full budget as in a fixed-size run.

The result has the same form as a fixed-size run's: the fixed-size tests on the collected rows
are kept as diagnostics (not primary), the sequential tests are listed as primary with their
always-valid p-values, and the reason of a decided case begins with ``sequential:``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from speceq.core.provenance import utc_now
from speceq.engines.base import SampleBatch, validate_batch
from speceq.inputs.cases import Case
from speceq.oracles.protocol import Oracle
from speceq.pipeline.analysis import look_support_failures, score_requests
from speceq.pipeline.config import RunConfig
from speceq.pipeline.plan import ChunkPlan, chunk_seed, concat_batches
from speceq.pipeline.prepared import PreparedRun, analyse_rows
from speceq.pipeline.sequential.evidence import CaseSequentialEvidence, evaluate_case, planned_tests
from speceq.stats import sequential as seq
from speceq.stats.scores import TokenScores
from speceq.store import ROLES, STORE_FORMAT, ChunkKey, SampleStore
from speceq.verdicts.evidence import SequentialEvidence, SequentialTestEvidence
from speceq.verdicts.result import CaseResult, RunResult, TestOutcome
from speceq.verdicts.sequential import decide_look
from speceq.verdicts.verdict import Verdict

SCHEDULE = "sequential-doubling-v1"
STORE_SUBDIR = "sequential"
#: How look-slice seeds derive from the run seed (recorded in provenance).
SEED_DERIVATION = "speceq.pipeline.plan.chunk_seed(run_seed, role, case_id, look slice)"


def look_totals(samples: int) -> tuple[int, ...]:
    """Samples per engine at each look for a budget of ``samples``: the look grid up to its first point >= ``samples``.

    The last look may pass the budget by up to a quarter of a doubling step (12.5 %) so that
    it lies on the grid; the first look is at 3 samples.
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


def _slice_plan(config: RunConfig, case: Case, role: str, index: int, n: int,
                ident: Mapping[str, Any]) -> ChunkPlan:
    seed = chunk_seed(config.seed, role, case.case_id, index)
    case_doc = {k: v for k, v in case.to_dict().items() if k != "text"}
    identity = {"format": STORE_FORMAT, "schedule": SCHEDULE, "role": role, "engine": ident[role], "case": case_doc,
                "run_seed": config.seed, "seed": seed, "slice": index, "n": n}
    return ChunkPlan(role, case, index, n, seed, ChunkKey.build(role, case.case_id, index, identity))


class _NoStop:
    requested = False


class _Collector:
    """Per case and role: the slices collected so far (stored, reused on a rerun) and their rows."""

    def __init__(self, prepared: PreparedRun) -> None:
        self.prepared = prepared
        self.store = SampleStore(prepared.config.out_dir / STORE_SUBDIR)
        self.batches: dict[tuple[str, str], list[SampleBatch]] = {}
        self.sampled = self.reused = 0

    def extend(self, wanted: Sequence[tuple[Case, int, int]]) -> dict[str, dict[str, SampleBatch]]:
        """Add slice ``index`` (``n`` samples) of each (case, index, n) for both roles; new rows per case and role.

        Slices not yet stored are sampled by the run's executor (in this process, or on
        worker processes / Ray, all at once); only this process validates and stores them.
        """
        prepared = self.prepared
        chunks = [_slice_plan(prepared.config, case, role, index, n, prepared.described)
                  for case, index, n in wanted for role in ROLES]
        missing = [c for c in chunks if not self.store.has(c.key)]
        self.reused += len(chunks) - len(missing)

        def store_chunk(chunk: ChunkPlan, batch: SampleBatch, elapsed: float) -> None:
            validate_batch(batch, chunk.request(), prepared.engines[chunk.role], case_id=chunk.case.case_id,
                           role=chunk.role)
            self.store.put(chunk.key, batch, {"elapsed_s": elapsed, "created": utc_now()})
            self.sampled += 1

        if missing:
            prepared.session.executor(pending=len(missing)).run(missing, lambda chunk: None, store_chunk, _NoStop())
        new: dict[str, dict[str, SampleBatch]] = {}
        for chunk in chunks:
            batch = self.store.get(chunk.key)  # analyse exactly what is stored
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
        collector = _Collector(prepared)
        collector.store.acquire_writer_lock()
        try:
            if not config.resume:
                collector.store.discard_all()
            progress = _run_cases(prepared, collector, names, level)
        finally:
            collector.store.release_writer_lock()
        provenance = prepared.completed({
            "chunks": {"reused": collector.reused, "sampled": collector.sampled,
                       "discarded_unreadable": list(collector.store.discarded)},
            "executor": prepared.session.executor(pending=0).description,  # the open parallel one, else serial
            "sequential": {"tests": k_tests, "level_per_test": level, "schedule": SCHEDULE,
                           "cases": {cid: {"verdict": p.verdict, "looks": p.looks, "n": p.n}
                                     for cid, p in progress.items()}}})
        base = {c.case_id: collector.rows("baseline", c.case_id) for c in cases}
        cand = {c.case_id: collector.rows("candidate", c.case_id) for c in cases}
        scorer = prepared.prefetch(score_requests(cases, base, cand))  # the diagnostics' scoring, on the workers too
        fixed = analyse_rows(prepared, base, cand, scorer, provenance)
        return _merge(fixed, progress, k_tests)


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


def _run_cases(prepared: PreparedRun, collector: _Collector, names: Mapping[str, list[str]],
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
        new = collector.extend(wanted)
        scorer = oracle
        if oracle is not None and states:
            scorer = prepared.prefetch([(st.case.case_id, st.case.prompts, new[st.case.case_id][role], st.case.params)
                                        for st in states for role in ROLES])
        still_open = []
        for st in states:
            decided = _look(config, st, new[st.case.case_id], collector, scorer, level)
            if decided is not None:
                progress[st.case.case_id] = decided
            else:
                still_open.append(st)
        states = still_open
        wanted = [(st.case, st.look, st.totals[st.look] - st.prev) for st in states]
    return {c.case_id: progress[c.case_id] for c in cases}


def _look(config: RunConfig, st: _CaseState, new: Mapping[str, SampleBatch], collector: _Collector,
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
    st.ev = ev = evaluate_case(case, collector.rows("baseline", case.case_id),
                               collector.rows("candidate", case.case_id), names=st.names, level=level,
                               alpha=config.alpha, scores=scored["candidate"], base_scores=scored["baseline"])
    budget = case.samples or config.samples
    failures: tuple[str, ...] = ()
    if oracle is not None and scored["candidate"] is not None and scored["baseline"] is not None:
        failures = look_support_failures(case, collector.rows("baseline", case.case_id), scored["baseline"],
                                         collector.rows("candidate", case.case_id), scored["candidate"],
                                         vocab_size=oracle.vocab_size, margin_nats=config.support_margin_nats)
    evidence = SequentialEvidence(
        hard_failures=failures,
        n=ev.n, look=st.look, looks=len(st.totals), budget=budget,
        tests=tuple(SequentialTestEvidence(name=t.name, max_evalue=t.max_evalue, pvalue=t.pvalue, crossing_sample=c)
                    for t, c in zip(ev.tests, ev.crossing_samples)),
        tv_upper_bound=None if ev.bound is None else ev.bound.upper,
        bound_grid_n=None if ev.bound is None else ev.bound.grid_n)
    verdict, reason = decide_look(evidence, tolerance=config.tolerance, threshold=1.0 / level)
    if verdict is None:
        return None
    n = budget if verdict == "inconclusive" else total
    return CaseProgress(case_id=case.case_id, verdict=verdict, looks=st.look, n=n, reason=reason, evidence=ev)


def _outcome(t: seq.EProcessResult, k_tests: int) -> TestOutcome:
    return TestOutcome(name=t.name, family="sequential", primary=True, statistic=t.statistic, pvalue=t.pvalue,
                       n=t.n, adjusted_pvalue=min(1.0, t.pvalue * k_tests), summary=t.summary())


def _merge(fixed: RunResult, progress: Mapping[str, CaseProgress], k_tests: int) -> RunResult:
    """The fixed-size result of the same rows with each sequential case's verdict, tests and bound put in."""
    cases: list[CaseResult] = []
    for c in fixed.cases:
        p = progress[c.case_id]
        if p.verdict is None:  # greedy: the fixed analysis decides
            cases.append(c)
            continue
        diag = tuple(dataclasses.replace(t, primary=False, adjusted_pvalue=None) for t in c.tests)
        ev = p.evidence
        tests = tuple(_outcome(t, k_tests) for t in ev.tests) if ev is not None else ()
        extra: dict[str, Any] = {}
        if ev is not None and ev.bound is not None:
            extra = {"tv_estimate": ev.bound.tv, "tv_upper_bound": ev.bound.upper,
                     "tv_reference": f"time-uniform ({ev.bound.reference})"}
        bound = "no TV bound" if c.tv_upper_bound is None else f"TV upper bound {c.tv_upper_bound:.4f}"
        note = (f"the fixed-size analysis of the same rows would say {c.verdict} ({bound}); it is shown for "
                "comparison only, since it is not valid after looking at the data along the way")
        cases.append(dataclasses.replace(c, verdict=p.verdict, reason=p.reason, tests=tests + diag, required_n=None,
                                         min_detectable_tv=None,  # the fixed-size chi-square's, not the e-processes'
                                         notes=(*c.notes, note), **extra))
    notes = (*fixed.notes, f"sequential mode: {k_tests} e-processes at level alpha/{k_tests} each (e-value "
                           f"Bonferroni, valid at every look); TV bounds time-uniform over the look grid")
    # the fixed analysis's pooled tests looked at rows chosen along the way: shown, never deciding
    pooled = tuple(dataclasses.replace(t, primary=False, adjusted_pvalue=None) for t in fixed.pooled_tests)
    return dataclasses.replace(fixed, verdict=Verdict.worst(c.verdict for c in cases), cases=tuple(cases), notes=notes,
                               pooled_tests=pooled, pooled_reason="")


def samples_used(result: RunResult) -> dict[str, int]:
    """Samples per engine each case used (its n when it stopped)."""
    return {c.case_id: int(min(c.n_baseline, c.n_candidate)) for c in result.cases}


__all__ = ["SCHEDULE", "STORE_SUBDIR", "CaseProgress", "SequentialLoop", "look_totals", "samples_used"]
