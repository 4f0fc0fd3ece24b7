"""The fixed-size loop of a run: sample every chunk of the plan (reusing stored ones), then analyse once.

- **collect**: every chunk of the plan (:mod:`speceq.pipeline.plan`) goes through the run's
  :class:`~speceq.pipeline.collect.collector.ChunkCollector`, the collection path the sequential
  loop uses too: stored chunks are reused, the others sampled by an executor, validated and
  stored atomically; progress; Ctrl-C stops after the chunks being sampled are stored and says
  how to resume. A changed budget reuses every stored chunk of the new plan.
- **analyse**: :func:`speceq.pipeline.prepared.analyse_rows` on every case's rows (chunks joined
  in slice order) with the run's oracle, its score requests sent ahead to the workers.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from speceq.engines.base import Engine, SampleBatch
from speceq.inputs.cases import Case
from speceq.pipeline.analysis import score_requests
from speceq.pipeline.collect import Executor, choose_executor
from speceq.pipeline.collect.code_identity import code_summary
from speceq.pipeline.collect.collector import ChunkCollector
from speceq.pipeline.collect.session import ExecutorSession
from speceq.pipeline.config import RESULT_FILE, RunConfig
from speceq.pipeline.control_arm import analyse_with_control, control_score_requests
from speceq.pipeline.plan import concat_batches, plan_chunks, role_samples, run_roles, slice_sizes
from speceq.pipeline.prepared import PreparedRun, analyse_rows
from speceq.store import CONTROL_ROLE, ROLES, SampleStore
from speceq.verdicts.result import RunResult

#: How fixed-size chunk seeds derive from the run seed (recorded in provenance).
SEED_DERIVATION = "speceq.pipeline.plan.chunk_seed(case seed or run_seed, role, case_id, slice)"


@dataclass(frozen=True, slots=True)
class Collected:
    """Outcome of collection: every case's rows per role, and chunk counts."""

    baseline: dict[str, SampleBatch]
    candidate: dict[str, SampleBatch]
    chunks_total: int
    chunks_reused: int
    chunks_sampled: int
    executor: str = "serial, in this process"
    discarded: tuple[dict[str, str], ...] = ()  # unreadable chunk files deleted and sampled again
    control: dict[str, SampleBatch] | None = None  # the numerics control's rows (None: the run has no control)


def collect(config: RunConfig, cases: Sequence[Case], engines: Mapping[str, Engine], *,
            specs: Mapping[str, tuple[str, Mapping[str, Any]]] | None = None,
            session: ExecutorSession | None = None) -> Collected:
    """Sample every chunk not yet in ``config.out_dir``'s store; return every case's rows.

    The cases' prompts must fit the engines' vocabularies (:func:`speceq.pipeline.runner.prepare`
    checks that before any sample). ``specs`` (role -> (spec, options)): the engines were
    resolved from these, and worker processes resolve them the same way; None: worker processes
    get pickled copies of ``engines`` (or the run samples serially when one cannot be pickled).
    ``session``: the run's executor session, whose workers stay up after collection (for oracle
    scoring); None: an executor for this collection only.
    """
    chunks = plan_chunks(config, cases, engines)

    def executor(pending: int) -> Executor:
        if session is not None:
            return session.executor(pending=pending)
        return choose_executor(executor=config.executor, workers=config.workers, ray_address=config.ray_address,
                               threads=config.threads, engines=engines, specs=specs, pending=pending)

    collector = ChunkCollector(SampleStore(config.out_dir), engines, executor, expected=chunks,
                               resume=config.resume, progress=config.progress, out_dir=config.out_dir,
                               chunk_timeout=config.chunk_timeout)
    with collector:
        (config.out_dir / RESULT_FILE).unlink(missing_ok=True)  # never leave a stale result beside new samples
        batches = collector.gather(chunks)
    roles = run_roles(engines)
    per_case: dict[str, dict[str, list[SampleBatch]]] = {r: {c.case_id: [] for c in cases} for r in roles}
    for chunk, batch in zip(chunks, batches):
        per_case[chunk.role][chunk.case.case_id].append(batch)
    joined = {r: {cid: concat_batches(bs) for cid, bs in per_case[r].items()} for r in roles}
    return Collected(joined["baseline"], joined["candidate"], len(chunks), collector.reused, collector.sampled,
                     collector.executor_description, tuple(collector.store.discarded), joined.get(CONTROL_ROLE))


def collection_summary(collected: Collected, engine_ids: Mapping[str, Mapping[str, Any]]) -> str:
    """One line: chunks reused and sampled, by which executor, and the engines' code identity."""
    code = "; ".join(f"{r} {code_summary(ids['code'])}" for r, ids in engine_ids.items())
    return (f"chunks: {collected.chunks_reused} reused from the store, {collected.chunks_sampled} sampled "
            f"({collected.executor}), {collected.chunks_total} in all; engine code: {code}")


class FixedSizeLoop:
    """Every case at its full budget: collect all chunks, then analyse once (Holm over the whole run)."""

    store_subdir = ""
    seed_derivation = SEED_DERIVATION
    extra_settings: Mapping[str, Any] = {}

    def first_round(self, config: RunConfig, cases: Sequence[Case]) -> int:
        """Chunks the run will sample (all of them): sizes the worker pool started before engines load."""
        roles = ROLES + ((CONTROL_ROLE,) if config.numerics_control is not None else ())
        return sum(len(slice_sizes(role_samples(config, c, r), config.chunk_size)) for c in cases for r in roles)

    def run(self, prepared: PreparedRun) -> RunResult:
        """Collect and analyse; the result carries the final provenance."""
        config = prepared.config
        collected = collect(config, prepared.cases, prepared.engines, specs=prepared.specs, session=prepared.session)
        print(f"speceq: {collection_summary(collected, prepared.described)}", file=sys.stderr, flush=True)
        if collected.control is None:
            scorer = prepared.prefetch(score_requests(prepared.cases, collected.baseline, collected.candidate))
        else:
            rows = {"baseline": collected.baseline, "candidate": collected.candidate, CONTROL_ROLE: collected.control}
            scorer = prepared.prefetch(control_score_requests(prepared.cases, rows))
        provenance = prepared.completed({
            "chunks": {"total": collected.chunks_total, "reused": collected.chunks_reused,
                       "sampled": collected.chunks_sampled, "discarded_unreadable": list(collected.discarded)},
            "executor": collected.executor})
        if collected.control is None:
            return analyse_rows(prepared, collected.baseline, collected.candidate, scorer, provenance)
        return analyse_with_control(config, prepared.cases, rows, prepared.described, scorer, provenance)


__all__ = ["Collected", "FixedSizeLoop", "SEED_DERIVATION", "collect", "collection_summary"]
