"""The fixed-size loop of a run: sample every chunk of the plan (reusing stored ones), then analyse once.

- **collect**: chunks already in the store (same fingerprint, which covers the engine's
  code: :mod:`speceq.pipeline.collect.code_identity`) are reused; the others are sampled by an
  executor (serial, local worker processes or Ray: :mod:`speceq.pipeline.collect`), checked with
  :func:`~speceq.engines.base.validate_batch` and stored atomically by this process only.
  A failure stops the run and keeps every finished chunk. Ctrl-C stops after the chunks being
  sampled are stored (a second Ctrl-C stops at once) and says how to resume. A changed
  budget reuses every stored chunk of the new plan (:mod:`speceq.pipeline.plan`).
- **analyse**: :func:`speceq.pipeline.prepared.analyse_rows` on every case's rows (chunks joined
  in slice order) with the run's oracle, its score requests sent ahead to the workers.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from speceq.core.provenance import utc_now
from speceq.engines.base import Engine, SampleBatch, validate_batch
from speceq.inputs.cases import Case
from speceq.pipeline.analysis import score_requests
from speceq.pipeline.checks import check_case_vocabularies
from speceq.pipeline.collect import choose_executor
from speceq.pipeline.collect.code_identity import code_summary
from speceq.pipeline.collect.progress import make_progress
from speceq.pipeline.collect.session import ExecutorSession
from speceq.pipeline.config import RESULT_FILE, RunConfig
from speceq.pipeline.plan import ChunkPlan, concat_batches, plan_chunks, slice_sizes
from speceq.pipeline.prepared import PreparedRun, analyse_rows
from speceq.pipeline.stopping import RunInterrupted, StopRequest, interrupted_message
from speceq.store import ROLES, SampleStore
from speceq.verdicts.result import RunResult

#: How fixed-size chunk seeds derive from the run seed (recorded in provenance).
SEED_DERIVATION = "speceq.pipeline.plan.chunk_seed(run_seed, role, case_id, slice)"


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


def collect(config: RunConfig, cases: Sequence[Case], engines: Mapping[str, Engine], *,
            specs: Mapping[str, tuple[str, Mapping[str, Any]]] | None = None,
            session: ExecutorSession | None = None) -> Collected:
    """Sample every chunk not yet in ``config.out_dir``'s store; return every case's rows.

    ``specs`` (role -> (spec, options)): the engines were resolved from these, and worker
    processes resolve them the same way; None: worker processes get pickled copies of
    ``engines`` (or the run samples serially when one cannot be pickled). ``session``: the
    run's executor session, whose workers stay up after collection (for oracle scoring);
    None: an executor for this collection only.
    """
    check_case_vocabularies(cases, engines)
    chunks = plan_chunks(config, cases, engines)
    store = SampleStore(config.out_dir)
    store.acquire_writer_lock()
    try:
        if not config.resume:
            store.discard_all()
        (config.out_dir / RESULT_FILE).unlink(missing_ok=True)  # never leave a stale result beside new samples
        stored = [c for c in chunks if store.has(c.key)]  # a changed configuration fails here, before any sampling
        stored_keys = {c.key for c in stored}
        missing = [c for c in chunks if c.key not in stored_keys]
        if session is not None:
            executor = session.executor(pending=len(missing))
        else:
            executor = choose_executor(executor=config.executor, workers=config.workers,
                                       ray_address=config.ray_address, threads=config.threads, engines=engines,
                                       specs=specs, pending=len(missing))
        sampled = 0

        def store_chunk(chunk: ChunkPlan, batch: SampleBatch, elapsed: float) -> None:
            nonlocal sampled
            validate_batch(batch, chunk.request(), engines[chunk.role], case_id=chunk.case.case_id, role=chunk.role)
            store.put(chunk.key, batch, {"elapsed_s": elapsed, "created": utc_now()})
            sampled += 1
            progress.finished(chunk)

        with StopRequest() as stop, make_progress(config.progress, chunks, stored) as progress:
            try:
                executor.run(missing, progress.started, store_chunk, stop)
            except KeyboardInterrupt:
                raise RunInterrupted(interrupted_message(config.out_dir, len(stored) + sampled, len(chunks))) from None
            if stop.requested and len(stored) + sampled < len(chunks):
                raise RunInterrupted(interrupted_message(config.out_dir, len(stored) + sampled, len(chunks)))
        # analyse exactly what is stored: read every chunk back, reused or just written
        per_case: dict[str, dict[str, list[SampleBatch]]] = {r: {c.case_id: [] for c in cases} for r in ROLES}
        for chunk in chunks:
            per_case[chunk.role][chunk.case.case_id].append(store.get(chunk.key))
    finally:
        store.release_writer_lock()
    joined = {r: {cid: concat_batches(bs) for cid, bs in per_case[r].items()} for r in ROLES}
    return Collected(joined["baseline"], joined["candidate"], len(chunks), len(stored), sampled,
                     executor.description, tuple(store.discarded))


def collection_summary(collected: Collected, engine_ids: Mapping[str, Mapping[str, Any]]) -> str:
    """One line: chunks reused and sampled, by which executor, and the engines' code identity."""
    code = "; ".join(f"{r} {code_summary(engine_ids[r]['code'])}" for r in ROLES)
    return (f"chunks: {collected.chunks_reused} reused from the store, {collected.chunks_sampled} sampled "
            f"({collected.executor}), {collected.chunks_total} in all; engine code: {code}")


class FixedSizeLoop:
    """Every case at its full budget: collect all chunks, then analyse once (Holm over the whole run)."""

    store_subdir = ""
    seed_derivation = SEED_DERIVATION
    extra_settings: Mapping[str, Any] = {}

    def first_round(self, config: RunConfig, cases: Sequence[Case]) -> int:
        """Chunks the run will sample (all of them): sizes the worker pool started before engines load."""
        return len(ROLES) * sum(len(slice_sizes(c.samples or config.samples, config.chunk_size)) for c in cases)

    def run(self, prepared: PreparedRun) -> RunResult:
        """Collect and analyse; the result carries the final provenance."""
        config = prepared.config
        collected = collect(config, prepared.cases, prepared.engines, specs=prepared.specs, session=prepared.session)
        print(f"speceq: {collection_summary(collected, prepared.described)}", file=sys.stderr, flush=True)
        scorer = prepared.prefetch(score_requests(prepared.cases, collected.baseline, collected.candidate))
        provenance = prepared.completed({
            "chunks": {"total": collected.chunks_total, "reused": collected.chunks_reused,
                       "sampled": collected.chunks_sampled, "discarded_unreadable": list(collected.discarded)},
            "executor": collected.executor})
        return analyse_rows(prepared, collected.baseline, collected.candidate, scorer, provenance)


__all__ = ["Collected", "FixedSizeLoop", "SEED_DERIVATION", "collect", "collection_summary"]
