"""Sequential runs: grow every case's samples look by look and stop it once it is decided.

The schedule is fixed before any data and does not depend on the budget: slices end at the
points of :func:`speceq.stats.sequential.look_grid` (3, 4, 5, 6, 8, ... 1500, 1875, 2250,
2625, 3000, ... samples per engine: four steps per doubling); there is a look after every
slice, up to the first grid point >= the budget (at most 12.5 % past it). Slice i of a case is seeded by :func:`speceq.pipeline.runner.chunk_seed` of its index,
so the data at a look is always a prefix of the data at the next one, a rerun with a larger
budget extends the same sequence, and the chunks are stored (in ``<out>/sequential/``, apart
from fixed-size runs) and reused on a rerun.

At each look, for every undecided sampling case: hard failures (a token the target cannot
emit) make it ``shifted``; so does any sequential test whose e-process reached K / alpha
(K = sequential tests of the run: e-value Bonferroni, family-wise error <= alpha however
often one looks); else it is ``equivalent`` when the time-uniform TV upper bound is below the
tolerance; else it goes on. A case still open at the budget is ``inconclusive``. Greedy
cases are not sequential: they are compared at the full budget as in a fixed-size run.

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

from speceq.core.provenance import collect_provenance, utc_now
from speceq.engines.base import Engine, SampleBatch, validate_batch
from speceq.inputs.cases import Case
from speceq.pipeline import runner as runmod
from speceq.pipeline.analysis import analyse_run, case_rng
from speceq.pipeline.collect.session import ExecutorSession
from speceq.pipeline.sequential.evidence import CaseSequentialEvidence, evaluate_case, planned_tests
from speceq.stats import sequential as seq
from speceq.stats.scores import TokenScores
from speceq.store import ROLES, STORE_FORMAT, ChunkKey, SampleStore, atomic_write, write_json_atomic
from speceq.verdicts.result import CaseResult, RunResult, TestOutcome

SCHEDULE = "sequential-doubling-v1"
STORE_SUBDIR = "sequential"


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


def _slice_plan(config: runmod.RunConfig, case: Case, role: str, index: int, n: int,
                ident: Mapping[str, Any]) -> runmod.ChunkPlan:
    seed = runmod.chunk_seed(config.seed, role, case.case_id, index)
    case_doc = {k: v for k, v in case.to_dict().items() if k != "text"}
    identity = {"format": STORE_FORMAT, "schedule": SCHEDULE, "role": role, "engine": ident[role], "case": case_doc,
                "run_seed": config.seed, "seed": seed, "slice": index, "n": n}
    return runmod.ChunkPlan(role, case, index, n, seed, ChunkKey.build(role, case.case_id, index, identity))


class _NoStop:
    requested = False


class _Collector:
    """Per case and role: the slices collected so far (stored, reused on a rerun) and their rows."""

    def __init__(self, config: runmod.RunConfig, engines: Mapping[str, Engine], session: ExecutorSession) -> None:
        self.config = config
        self.engines = engines
        self.session = session
        self.ident = runmod.engine_identities(config, engines)
        self.store = SampleStore(config.out_dir / STORE_SUBDIR)
        self.batches: dict[tuple[str, str], list[SampleBatch]] = {}
        self.sampled = self.reused = 0

    def extend(self, wanted: Sequence[tuple[Case, int, int]]) -> dict[str, dict[str, SampleBatch]]:
        """Add slice ``index`` (``n`` samples) of each (case, index, n) for both roles; new rows per case and role.

        Slices not yet stored are sampled by the run's executor (in this process, or on
        worker processes / Ray, all at once); only this process validates and stores them.
        """
        chunks = [_slice_plan(self.config, case, role, index, n, self.ident)
                  for case, index, n in wanted for role in ROLES]
        missing = [c for c in chunks if not self.store.has(c.key)]
        self.reused += len(chunks) - len(missing)

        def store_chunk(chunk: runmod.ChunkPlan, batch: SampleBatch, elapsed: float) -> None:
            validate_batch(batch, chunk.request(), self.engines[chunk.role], case_id=chunk.case.case_id,
                           role=chunk.role)
            self.store.put(chunk.key, batch, {"elapsed_s": elapsed, "created": utc_now()})
            self.sampled += 1

        if missing:
            self.session.executor(pending=len(missing)).run(missing, lambda chunk: None, store_chunk, _NoStop())
        new: dict[str, dict[str, SampleBatch]] = {}
        for chunk in chunks:
            batch = self.store.get(chunk.key)  # analyse exactly what is stored
            self.batches.setdefault((chunk.role, chunk.case.case_id), []).append(batch)
            new.setdefault(chunk.case.case_id, {})[chunk.role] = batch
        return new

    def rows(self, role: str, case_id: str) -> SampleBatch:
        return runmod.concat_batches(self.batches[(role, case_id)])


def _decide(ev: CaseSequentialEvidence, failures: Sequence[str], tolerance: float, look: int,
            k: float) -> tuple[str | None, str]:
    at = f"decided at n = {ev.n} samples per engine after {look} look{'s' if look > 1 else ''}"
    if failures:
        return "shifted", f"sequential: {at}; hard failure: {failures[0]}"
    crossed = [(c, t) for t, c in zip(ev.tests, ev.crossing_samples) if c is not None]
    if crossed:
        c, t = min(crossed, key=lambda x: x[0])
        return "shifted", (f"sequential: {at}; {t.name} e-value {t.max_evalue:.3g} >= {k:.3g} (K/alpha; "
                           f"always-valid p = {t.pvalue:.3g}), first crossed at sample {c}")
    if ev.bound is not None and ev.bound.upper < tolerance:
        return "equivalent", (f"sequential: {at}; no e-process reached {k:.3g} and the time-uniform TV upper bound "
                              f"{ev.bound.upper:.4f} < tolerance {tolerance:g} (data up to grid point "
                              f"n = {ev.bound.grid_n})")
    return None, ""


def _scores(oracle: Any, case: Case, new_cand: SampleBatch, row_offset: int) -> TokenScores:
    s = oracle.score(case.prompts, new_cand, case.params)
    return dataclasses.replace(s, row=np.asarray(s.row) + row_offset)


def run_sequential(config: runmod.RunConfig, cases: Sequence[Case], *,
                   engines: Mapping[str, Engine] | None = None) -> RunResult:
    """A sequential run of ``cases`` (see the module docstring); writes result.json like :func:`speceq.pipeline.runner.run`."""
    runmod.check_cases(cases)
    runmod._apply_threads(config.threads)
    runmod.check_sample_sizes(config, cases)
    specs = None if engines is not None else {r: (getattr(config, r), dict(getattr(config, f"{r}_options")))
                                               for r in ROLES}
    with ExecutorSession(executor=config.executor, workers=config.workers, ray_address=config.ray_address,
                         threads=config.threads, engines=engines, specs=specs) as session:
        session.prestart(pending=len(ROLES) * len(cases))  # the first round: one slice per case and engine
        engines = dict(engines) if engines is not None else runmod.resolve_engines(config)
        runmod.check_engines_comparable(engines)
        for role in ROLES:
            for case in cases:
                case.check_vocab(engines[role].vocab_size)
        described = runmod.engine_identities(config, engines)
        settings = {**config.settings(), "sequential": True, "schedule": SCHEDULE}
        seeds = {"run_seed": config.seed, "derivation": "speceq.pipeline.runner.chunk_seed(run_seed, role, case_id, look slice)"}
        provenance = collect_provenance(seeds=seeds, engines=described, settings=settings,
                                        extra={"cases": [c.to_dict() for c in cases], "status": "collecting"})
        config.out_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(config.out_dir / runmod.PROVENANCE_FILE, provenance)
        (config.out_dir / runmod.RESULT_FILE).unlink(missing_ok=True)
        oracle = runmod.make_oracle(config, engines)
        if oracle is not None:
            runmod.check_oracle_matches(oracle, engines)
            provenance["oracle"] = oracle.describe()
        has_draft = oracle is not None and getattr(oracle, "has_draft", getattr(oracle, "draft", None) is not None)
        sampling = [c for c in cases if not c.params.greedy]
        names = {c.case_id: planned_tests(c, oracle=oracle is not None, has_draft=has_draft) for c in sampling}
        k_tests = sum(len(v) for v in names.values())
        level = config.alpha / max(1, k_tests)
        session.set_engines(engines)
        sources = runmod.oracle_sources(config, engines) if oracle is not None else None
        collector = _Collector(config, engines, session)
        collector.store.acquire_writer_lock()
        try:
            if not config.resume:
                collector.store.discard_all()
            progress = _run_cases(config, cases, collector, oracle, sources, names, level)
        finally:
            collector.store.release_writer_lock()
        provenance = {**provenance, "status": "complete", "finished": utc_now(),
                      "chunks": {"reused": collector.reused, "sampled": collector.sampled},
                      "executor": _executor_description(session),
                      "sequential": {"tests": k_tests, "level_per_test": level, "schedule": SCHEDULE,
                                     "cases": {cid: {"verdict": p.verdict, "looks": p.looks, "n": p.n}
                                               for cid, p in progress.items()}}}
        base = {c.case_id: collector.rows("baseline", c.case_id) for c in cases}
        cand = {c.case_id: collector.rows("candidate", c.case_id) for c in cases}
        scorer = oracle
        if oracle is not None and sources is not None:  # the fixed-size diagnostics' scoring, on the workers too
            rows = runmod.Collected(base, cand, 0, 0, 0)
            scorer = session.prefetch_scores(oracle, runmod.oracle_requests(cases, rows), target=sources[0],
                                             draft=sources[1])
        fixed = analyse_run(cases, base, cand, oracle=scorer, alpha=config.alpha, tolerance=config.tolerance,
                            seed=config.seed, engines={r: described[r]["config"] for r in ROLES},
                            provenance=provenance, progress=config.progress)
    result = _merge(fixed, progress, k_tests, config.alpha)
    atomic_write(config.out_dir / runmod.RESULT_FILE, lambda f: f.write((result.to_json() + "\n").encode("utf-8")))
    write_json_atomic(config.out_dir / runmod.PROVENANCE_FILE, provenance)
    return result


def _executor_description(session: ExecutorSession) -> str:
    executor = session.executor(pending=0)  # the open parallel executor, else serial
    return executor.description


@dataclass(slots=True)
class _CaseState:
    """An open sampling case: its looks, scores so far and latest evidence."""

    case: Case
    names: list[str]
    totals: tuple[int, ...]
    first_probs: np.ndarray | None
    score_parts: list[TokenScores] = dataclasses.field(default_factory=list)
    rows_so_far: int = 0
    prev: int = 0
    look: int = 0
    ev: CaseSequentialEvidence | None = None


def _run_cases(config: runmod.RunConfig, cases: Sequence[Case], collector: _Collector, oracle: Any | None,
               sources: tuple[Any, Any] | None, names: Mapping[str, list[str]],
               level: float) -> dict[str, CaseProgress]:
    """Every case, look by look in lock step: each round samples the next slice of every open case at once.

    A case's data, scores and decisions depend only on its own seeded slices, so this gives the
    same verdicts, looks and samples as taking the cases one after another (tested), while an
    executor with worker processes samples (and scores) the open cases' slices side by side.
    """
    progress: dict[str, CaseProgress] = {}
    wanted: list[tuple[Case, int, int]] = []
    states: list[_CaseState] = []
    for case in cases:
        budget = case.samples or config.samples
        if case.case_id not in names:  # greedy: the whole budget in one slice, decided by the fixed analysis
            wanted.append((case, 0, budget))
            progress[case.case_id] = CaseProgress(case_id=case.case_id, verdict=None, looks=1, n=budget)
            continue
        first_probs = None
        if oracle is not None:
            first_probs = oracle.next_token_probs([list(case.prompt_ids)], case.params)[0].astype(np.float64)
        state = _CaseState(case=case, names=names[case.case_id], totals=look_totals(budget), first_probs=first_probs)
        states.append(state)
        wanted.append((case, 0, state.totals[0]))
    while wanted:
        new = collector.extend(wanted)
        scorer = oracle
        if oracle is not None and sources is not None and states:
            requests = [(st.case.case_id, st.case.prompts, new[st.case.case_id]["candidate"], st.case.params)
                        for st in states]
            scorer = collector.session.prefetch_scores(oracle, requests, target=sources[0], draft=sources[1])
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


def _look(config: runmod.RunConfig, st: _CaseState, new: Mapping[str, SampleBatch], collector: _Collector,
          oracle: Any | None, level: float) -> CaseProgress | None:
    """One look at a case after its newest slice: its progress when decided (or out of budget), else None."""
    case = st.case
    st.look += 1
    total = st.totals[st.look - 1]
    st.prev = total
    failures: list[str] = []
    scores = None
    if oracle is not None:
        st.score_parts.append(_scores(oracle, case, new["candidate"], st.rows_so_far))
        scores = TokenScores.concatenate(st.score_parts)
        bad = np.flatnonzero(np.asarray(scores.prob) <= 0)
        if bad.size:
            r, t = int(scores.row[bad[0]]), int(scores.position[bad[0]])
            failures.append(f"row {r} position {t}: token {int(scores.token[bad[0]])} has probability 0 under the "
                            f"processed target ({bad.size} such tokens)")
    st.rows_so_far += new["candidate"].rows
    st.ev = ev = evaluate_case(case, collector.rows("baseline", case.case_id),
                               collector.rows("candidate", case.case_id), names=st.names, level=level,
                               alpha=config.alpha, scores=scores, first_probs=st.first_probs,
                               rng=case_rng(config.seed, case.case_id, 7))
    verdict, reason = _decide(ev, failures, config.tolerance, st.look, 1.0 / level)
    if verdict is not None:
        return CaseProgress(case_id=case.case_id, verdict=verdict, looks=st.look, n=total, reason=reason, evidence=ev)
    if st.look < len(st.totals):
        return None
    budget = case.samples or config.samples
    bound = "no time-uniform TV bound yet" if ev.bound is None else (
        f"the time-uniform TV upper bound {ev.bound.upper:.4f} >= tolerance {config.tolerance:g}")
    reason = (f"sequential: undecided at the budget n = {budget} after {len(st.totals)} looks: no e-process reached "
              f"{1.0 / level:.3g} and {bound}; rerun with a larger --samples (same --out and seed) to continue the "
              "same sequence, which stays valid")
    return CaseProgress(case_id=case.case_id, verdict="inconclusive", looks=len(st.totals), n=budget, reason=reason,
                        evidence=ev)


def _outcome(t: seq.EProcessResult, k_tests: int, alpha: float) -> TestOutcome:
    return TestOutcome(name=t.name, family="sequential", primary=True, statistic=t.statistic, pvalue=t.pvalue,
                       n=t.n, adjusted_pvalue=min(1.0, t.pvalue * k_tests), summary=t.summary())


def _merge(fixed: RunResult, progress: Mapping[str, CaseProgress], k_tests: int, alpha: float) -> RunResult:
    cases: list[CaseResult] = []
    for c in fixed.cases:
        p = progress[c.case_id]
        if p.verdict is None:  # greedy: the fixed analysis decides
            cases.append(c)
            continue
        diag = tuple(dataclasses.replace(t, primary=False, adjusted_pvalue=None) for t in c.tests)
        ev = p.evidence
        tests = tuple(_outcome(t, k_tests, alpha) for t in ev.tests) if ev is not None else ()
        extra: dict[str, Any] = {}
        if ev is not None and ev.bound is not None:
            extra = {"tv_estimate": ev.bound.tv, "tv_upper_bound": ev.bound.upper,
                     "tv_reference": f"time-uniform ({ev.bound.reference})"}
        bound = "no TV bound" if c.tv_upper_bound is None else f"TV upper bound {c.tv_upper_bound:.4f}"
        note = (f"the fixed-size analysis of the same rows would say {c.verdict} ({bound}); it is shown for "
                "comparison only, since it is not valid after looking at the data along the way")
        cases.append(dataclasses.replace(c, verdict=p.verdict, reason=p.reason, tests=tests + diag, required_n=None,
                                         notes=(*c.notes, note), **extra))
    verdicts = {c.verdict for c in cases}
    verdict = next((v for v in ("shifted", "inconclusive") if v in verdicts), "equivalent")
    notes = (*fixed.notes, f"sequential mode: {k_tests} e-processes at level alpha/{k_tests} each (e-value "
                           f"Bonferroni, valid at every look); TV bounds time-uniform over the look grid")
    return dataclasses.replace(fixed, verdict=verdict, cases=tuple(cases), notes=notes)


def samples_used(result: RunResult) -> dict[str, int]:
    """Samples per engine each case used (its n when it stopped)."""
    return {c.case_id: int(min(c.n_baseline, c.n_candidate)) for c in result.cases}


__all__ = ["CaseProgress", "look_totals", "run_sequential", "samples_used"]
