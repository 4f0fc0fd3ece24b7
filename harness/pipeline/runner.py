"""One equivalence run: plan -> collect -> analyse -> write.

- **plan**: every case is cut into seed slices of at most ``chunk_size`` samples; one chunk
  = (role, case, slice). Its seed is :func:`chunk_seed` of (run seed, role, case id, slice).
- **collect**: chunks already in the store (same fingerprint, which covers the engine's
  code: :mod:`speceq.pipeline.collect.code_identity`) are reused; the others are sampled by an
  executor (serial, local worker processes or Ray: :mod:`speceq.pipeline.collect`), checked with
  :func:`~speceq.engines.base.validate_batch` and stored atomically by this process only.
  A failure stops the run and keeps every finished chunk. Ctrl-C stops after the chunks being
  sampled are stored (a second Ctrl-C stops at once) and says how to resume. A changed
  budget reuses every stored chunk of the new plan: the last slice of a case is stored under
  its own sample count, so growing or shrinking ``samples`` samples only what the new plan
  lacks and gives the samples of a fresh run at that budget.
- **analyse**: :func:`speceq.pipeline.analysis.analyse_run` on every case's rows (chunks joined in
  slice order) and, when on, the target oracle.
- **write**: ``result.json`` and ``provenance.json`` in the output folder, next to the
  store's ``chunks/``.
"""

from __future__ import annotations

import hashlib
import os
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from speceq.core.defaults import (
    DEFAULT_ALPHA,
    DEFAULT_CHUNK_SIZE,
    DEFAULT_SAMPLES,
    DEFAULT_TOLERANCE,
    NEAR_TIE_NATS,
    ORACLE_DTYPES,
)
from speceq.core.provenance import collect_provenance, utc_now
from speceq.engines.base import Engine, SampleBatch, SampleRequest, validate_batch
from speceq.errors import ConfigError
from speceq.inputs.cases import Case
from speceq.pipeline.collect import EXECUTORS, choose_executor
from speceq.pipeline.collect.code_identity import code_summary, engine_code_identity
from speceq.pipeline.collect.progress import make_progress
from speceq.pipeline.collect.session import ExecutorSession, ModelSource
from speceq.store import ROLES, STORE_FORMAT, ChunkKey, SampleStore, atomic_write, write_json_atomic
from speceq.verdicts.result import RunResult

RESULT_FILE = "result.json"
PROVENANCE_FILE = "provenance.json"
_ROLE_CODES = {"baseline": 1, "candidate": 2}


def chunk_seed(run_seed: int, role: str, case_id: str, slice_index: int) -> int:
    """The 63-bit seed of one chunk.

    ``numpy.random.SeedSequence(entropy=run_seed, spawn_key=(role code, 4 words of
    SHA-256(case id), slice_index))``, first two 32-bit words of its state, top 63 bits.
    Baseline and candidate get independent streams (role code 1 and 2), so the two-sample
    tests compare independent draws; every chunk's seed is far from every other one (nearby
    integer seeds are not always independent, e.g. vLLM with ``n > 1``).
    """
    digest = hashlib.sha256(case_id.encode("utf-8")).digest()
    words = [int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4)]
    ss = np.random.SeedSequence(entropy=run_seed, spawn_key=(_ROLE_CODES[role], *words, slice_index))
    lo, hi = (int(x) for x in ss.generate_state(2, dtype=np.uint32))
    return ((hi << 32) | lo) >> 1


@dataclass(frozen=True, slots=True, kw_only=True)
class RunConfig:
    """Settings of one run (all validated; errors name the field).

    baseline / candidate: engine specs (registry names or ``module:attr``); *_options:
    keyword options for each. oracle: score the candidate's tokens with the target
    (``oracle_model``: a model folder; None = the baseline engine's loaded target model when
    it exposes one as ``.model``, else the bundled target). oracle_draft: the draft the
    oracle scores for the draft-drift test: ``"auto"`` (the candidate engine's loaded
    ``.draft``, if any), ``"bundled"``, a model folder, or None (no draft). oracle_share_prefix:
    the oracle runs each prompt once and scores only the generated tokens against its cache
    (~6x less oracle work; log-probabilities equal to 1e-5, not bit for bit, see
    docs/SPEED.md; default on; False scores whole rows, bit-identical to transformers). samples: samples of each
    case's prompt per engine; chunk_size: samples per stored chunk. alpha: family-wise
    false-alarm level; tolerance: TV below which a case may be called equivalent.
    out_dir: store, result and provenance folder. resume: reuse stored chunks (False
    discards them first). threads: torch threads, per worker process too (None:
    ``$SPECEQ_TORCH_THREADS`` or 1). progress: a progress bar on a terminal, plain lines
    elsewhere. executor: ``"local"`` (this machine) or ``"ray"``; workers: local worker
    processes (1: sample in this process; None: one per usable CPU, see
    :func:`speceq.pipeline.collect.auto_workers`), or the Ray tasks in flight (None: one per cluster
    CPU); ray_address: the Ray cluster to use (None: start a local one for the run).
    near_tie_nats: greedy cases' near-tie threshold, the target's top-2 margin (nats) up to
    which a divergence is numerical, not a bug
    (default 1e-3, measured on float32 CPU; bf16 engines need ~1e-2).
    oracle_dtype: precision of the transformers oracle (default float32); a loaded engine model
    of another dtype is copied, never cast in place. oracle_server: score with an
    OpenAI-compatible server's prompt log-probabilities instead of transformers
    (:class:`speceq.oracles.server.ServerOracle`; no draft); oracle_top_logprobs: raw
    log-probabilities it asks per position (None: the whole vocabulary).
    """

    baseline: str = "baseline"
    candidate: str = "reference"
    baseline_options: Mapping[str, Any] = field(default_factory=dict)
    candidate_options: Mapping[str, Any] = field(default_factory=dict)
    oracle: bool = True
    oracle_model: str | None = None
    oracle_draft: str | None = "auto"
    oracle_share_prefix: bool = True
    samples: int = DEFAULT_SAMPLES
    chunk_size: int = DEFAULT_CHUNK_SIZE
    seed: int = 0
    alpha: float = DEFAULT_ALPHA
    tolerance: float = DEFAULT_TOLERANCE
    out_dir: Path = Path("speceq-out")
    resume: bool = True
    threads: int | None = None
    progress: bool = True
    executor: str = "local"
    workers: int | None = 1
    ray_address: str | None = None
    near_tie_nats: float = NEAR_TIE_NATS
    oracle_dtype: str = "float32"
    oracle_server: str | None = None
    oracle_top_logprobs: int | None = None

    def __post_init__(self) -> None:
        def bad(name: str, expected: str) -> ConfigError:
            return ConfigError(f"expected {expected}, got {getattr(self, name)!r}", where=f"run.{name}")

        def is_int(v: Any) -> bool:
            return isinstance(v, int) and not isinstance(v, bool)

        for name in ("baseline", "candidate"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise bad(name, "a non-empty engine spec")
            if not isinstance(getattr(self, f"{name}_options"), Mapping):
                raise bad(f"{name}_options", "a mapping of option names to values")
        if not is_int(self.samples) or self.samples < 1:
            raise bad("samples", "an integer >= 1")
        if not is_int(self.chunk_size) or self.chunk_size < 1:
            raise bad("chunk_size", "an integer >= 1")
        if not is_int(self.seed) or self.seed < 0:
            raise bad("seed", "an integer >= 0")
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or not 0 < self.alpha < 1:
            raise bad("alpha", "a number in (0, 1)")
        if isinstance(self.tolerance, bool) or not isinstance(self.tolerance, (int, float)) or not 0 < self.tolerance <= 1:
            raise bad("tolerance", "a total-variation distance in (0, 1]")
        if isinstance(self.near_tie_nats, bool) or not isinstance(self.near_tie_nats, (int, float)) \
                or not 0 <= self.near_tie_nats < float("inf"):
            raise bad("near_tie_nats", "a finite number of nats >= 0")
        if self.threads is not None and (not is_int(self.threads) or self.threads < 1):
            raise bad("threads", "an integer >= 1 or None")
        if self.executor not in EXECUTORS:
            raise bad("executor", f"one of {', '.join(EXECUTORS)}")
        if self.workers is not None and (not is_int(self.workers) or self.workers < 1):
            raise bad("workers", "an integer >= 1 or None (one per usable CPU)")
        if self.ray_address is not None and (not isinstance(self.ray_address, str) or not self.ray_address):
            raise bad("ray_address", "a Ray cluster address ('auto', 'HOST:PORT', 'ray://HOST:PORT') or None")
        if self.ray_address is not None and self.executor != "ray":
            raise bad("ray_address", "no address unless executor='ray'")
        if not isinstance(self.oracle_share_prefix, bool):
            raise bad("oracle_share_prefix", "True or False")
        if self.oracle_model is not None and not isinstance(self.oracle_model, str):
            raise bad("oracle_model", "a model folder path or None")
        if self.oracle_draft is not None and (not isinstance(self.oracle_draft, str) or not self.oracle_draft):
            raise bad("oracle_draft", "'auto', 'bundled', a model folder path or None")
        if self.oracle_dtype not in ORACLE_DTYPES:
            raise bad("oracle_dtype", f"one of {', '.join(ORACLE_DTYPES)}")
        if self.oracle_server is not None:
            if not isinstance(self.oracle_server, str) or not self.oracle_server.startswith(("http://", "https://")):
                raise bad("oracle_server", "an http(s) URL of an OpenAI-compatible server, or None")
            if self.oracle_model is not None:
                raise bad("oracle_model", "no model folder with oracle_server (the server's model is the oracle's)")
        if self.oracle_top_logprobs is not None:
            if not is_int(self.oracle_top_logprobs) or self.oracle_top_logprobs < 2:
                raise bad("oracle_top_logprobs", "an integer >= 2, or None (the whole vocabulary)")
            if self.oracle_server is None:
                raise bad("oracle_top_logprobs", "no value without oracle_server")
        object.__setattr__(self, "out_dir", Path(self.out_dir))

    def settings(self) -> dict[str, Any]:
        """JSON-able settings for provenance."""
        return {
            "baseline": self.baseline, "candidate": self.candidate,
            "baseline_options": dict(self.baseline_options), "candidate_options": dict(self.candidate_options),
            "oracle": self.oracle, "oracle_model": self.oracle_model, "oracle_draft": self.oracle_draft,
            "oracle_share_prefix": self.oracle_share_prefix,
            "samples": self.samples,
            "chunk_size": self.chunk_size, "seed": self.seed, "alpha": self.alpha, "tolerance": self.tolerance,
            "out_dir": str(self.out_dir), "resume": self.resume, "threads": self.threads,
            "executor": self.executor, "workers": self.workers, "ray_address": self.ray_address,
            "near_tie_nats": self.near_tie_nats, "oracle_dtype": self.oracle_dtype,
            "oracle_server": self.oracle_server, "oracle_top_logprobs": self.oracle_top_logprobs,
        }


@dataclass(frozen=True, slots=True)
class ChunkPlan:
    """One chunk to collect: which engine role, case and seed slice, and its store key."""

    role: str
    case: Case
    slice_index: int
    n: int
    seed: int
    key: ChunkKey

    def request(self) -> SampleRequest:
        return SampleRequest(prompts=tuple(tuple(p) for p in self.case.prompts), params=self.case.params,
                             n=self.n, seed=self.seed, batch_size=self.case.batch_size)

    def label(self) -> str:
        return f"{self.role} · {self.case.case_id} · slice {self.slice_index}"


def slice_sizes(samples: int, chunk_size: int) -> list[int]:
    """Samples per slice: full chunks, then the remainder."""
    full, rest = divmod(samples, chunk_size)
    return [chunk_size] * full + ([rest] if rest else [])


def engine_identities(config: RunConfig, engines: Mapping[str, Engine]) -> dict[str, dict[str, Any]]:
    """Per role: the spec, options, name, ``describe()`` config and code identity of its engine (JSON-able)."""
    return {r: {"spec": getattr(config, r), "options": dict(getattr(config, f"{r}_options")),
                "name": engines[r].name, "config": engines[r].describe(),
                "code": engine_code_identity(engines[r])} for r in ROLES}


def plan_chunks(config: RunConfig, cases: Sequence[Case], engines: Mapping[str, Engine]) -> list[ChunkPlan]:
    """Every chunk of the run, case by case, baseline before candidate, slices in order."""
    ident = engine_identities(config, engines)
    chunks = []
    for case in cases:
        case_doc = {k: v for k, v in case.to_dict().items() if k != "text"}  # text is display only
        for role in ROLES:
            for i, n in enumerate(slice_sizes(case.samples or config.samples, config.chunk_size)):
                seed = chunk_seed(config.seed, role, case.case_id, i)
                identity = {"format": STORE_FORMAT, "role": role, "engine": ident[role], "case": case_doc,
                            "run_seed": config.seed, "seed": seed, "slice": i, "n": n}
                key = ChunkKey.build(role, case.case_id, i, identity, samples=n)
                chunks.append(ChunkPlan(role, case, i, n, seed, key))
    return chunks


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during collection: finished chunks are stored; rerunning resumes."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class _StopRequest:
    """While active (main thread only), the first SIGINT only asks to stop after the current chunk.

    The handler in place before (Python's default, or SIG_IGN in a background job) is put
    back on exit.
    """

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None
        self._installed = False

    def _handler(self, signum: int, frame: Any) -> None:
        if self.requested:  # second Ctrl-C: stop now
            raise KeyboardInterrupt
        self.requested = True
        sys.stderr.write("\nspeceq: stopping after the current chunk is stored (Ctrl-C again to stop now)\n")

    def __enter__(self) -> _StopRequest:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handler)
            self._installed = True
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)


@dataclass(frozen=True, slots=True)
class Collected:
    """Outcome of collection: every case's rows per role, and chunk counts."""

    baseline: dict[str, SampleBatch]
    candidate: dict[str, SampleBatch]
    chunks_total: int
    chunks_reused: int
    chunks_sampled: int
    executor: str = "serial, in this process"


def concat_batches(batches: Sequence[SampleBatch]) -> SampleBatch:
    """Rows of several chunks in order; counts and times summed (None if any chunk lacks them)."""

    def total(name: str) -> Any:
        vals = [getattr(b, name) for b in batches]
        return None if any(v is None for v in vals) else sum(vals)

    return SampleBatch(
        tokens=np.concatenate([b.tokens for b in batches]),
        lengths=np.concatenate([b.lengths for b in batches]),
        prompt_index=np.concatenate([b.prompt_index for b in batches]),
        drafted_tokens=total("drafted_tokens"), accepted_tokens=total("accepted_tokens"),
        verify_steps=total("verify_steps"), wall_time_s=total("wall_time_s"),
        info={"chunks": len(batches)},
    )


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
    for role in ROLES:
        for case in cases:
            try:
                case.check_vocab(engines[role].vocab_size)
            except ConfigError as e:
                from speceq.models.vocab import option_hint, source_note

                eng = engines[role]
                raise ConfigError(
                    f"{e} ({role} engine {eng.name!r}, vocabulary {eng.vocab_size}{source_note(eng, 'vocab_size')}); "
                    f"if the prompts are right, {option_hint(role, 'vocab_size', '<the model vocabulary size>')}"
                ) from None
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

        with _StopRequest() as stop, make_progress(config.progress, chunks, stored) as progress:
            try:
                executor.run(missing, progress.started, store_chunk, stop)
            except KeyboardInterrupt:
                raise RunInterrupted(_interrupted_message(config, len(stored) + sampled, len(chunks))) from None
            if stop.requested and len(stored) + sampled < len(chunks):
                raise RunInterrupted(_interrupted_message(config, len(stored) + sampled, len(chunks)))
        # analyse exactly what is stored: read every chunk back, reused or just written
        per_case: dict[str, dict[str, list[SampleBatch]]] = {r: {c.case_id: [] for c in cases} for r in ROLES}
        for chunk in chunks:
            per_case[chunk.role][chunk.case.case_id].append(store.get(chunk.key))
    finally:
        store.release_writer_lock()
    joined = {r: {cid: concat_batches(bs) for cid, bs in per_case[r].items()} for r in ROLES}
    return Collected(joined["baseline"], joined["candidate"], len(chunks), len(stored), sampled,
                     executor.description)


def collection_summary(collected: Collected, engine_ids: Mapping[str, Mapping[str, Any]]) -> str:
    """One line: chunks reused and sampled, by which executor, and the engines' code identity."""
    code = "; ".join(f"{r} {code_summary(engine_ids[r]['code'])}" for r in ROLES)
    return (f"chunks: {collected.chunks_reused} reused from the store, {collected.chunks_sampled} sampled "
            f"({collected.executor}), {collected.chunks_total} in all; engine code: {code}")


def _interrupted_message(config: RunConfig, done: int, total: int) -> str:
    return (f"interrupted: {done} of {total} chunks are stored in {config.out_dir}; run the same command "
            f"again (with the same --out, without --fresh) to resume where it stopped")


def resolve_engines(config: RunConfig) -> dict[str, Engine]:
    """The baseline and candidate engines of ``config`` from the engine registry."""
    from speceq.engines.registry import resolve_engine

    return {r: resolve_engine(getattr(config, r), options=dict(getattr(config, f"{r}_options"))) for r in ROLES}


def _loaded_model(engine: Engine, attribute: str) -> Any | None:
    """``engine.<attribute>`` when it is a loaded transformers model, else None."""
    model = getattr(engine, attribute, None)
    return model if model is not None and hasattr(model, "config") and hasattr(model, "forward") else None


#: Fewest samples per engine of a sampling case with which any of its tests can reject.
MIN_SAMPLES = 10


def check_cases(cases: Sequence[Case]) -> None:
    """Refuse an empty case list or duplicate case ids (ConfigError naming them)."""
    if not cases:
        raise ConfigError("no cases to run", where="cases")
    ids = [c.case_id for c in cases]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ConfigError(f"duplicate case ids {dup}", where="cases")


def check_sample_sizes(config: RunConfig, cases: Sequence[Case]) -> None:
    """Refuse sampling cases with too few samples for any test to say anything."""
    from speceq.stats import required_n_two_sample

    for case in cases:
        n = case.samples or config.samples
        if not case.params.greedy and n < MIN_SAMPLES:
            need = required_n_two_sample(config.tolerance, 10, config.alpha)
            raise ConfigError(
                f"{n} samples per engine is too few for any test (at least {MIN_SAMPLES}); detecting a TV shift of "
                f"{config.tolerance:g} over ~10 likely tokens at alpha={config.alpha:g} needs about {need}",
                where=f"case {case.case_id!r}.samples" if case.samples else "run.samples",
            )


def check_engines_comparable(engines: Mapping[str, Engine]) -> None:
    """Baseline and candidate must share a vocabulary and an EOS id: their tokens are compared as ids."""
    from speceq.models.vocab import option_hint, source_note

    base, cand = engines["baseline"], engines["candidate"]
    for attr in ("vocab_size", "eos_token_id"):
        a, b = getattr(base, attr), getattr(cand, attr)
        if a != b:
            # fix the side whose value nothing declared (the byte model's default), else the candidate
            role, value = ("baseline", b) if source_note(base, attr) and not source_note(cand, attr) else ("candidate", a)
            what = "vocabulary" if attr == "vocab_size" else "EOS id"
            def note(engine: Engine, attr: str = attr) -> str:
                return " (the bundled byte model's default)" if source_note(engine, attr) else ""

            raise ConfigError(
                f"the candidate {cand.name!r} has {what} {b}{note(cand)} but the baseline {base.name!r} "
                f"has {a}{note(base)}: token ids of different vocabularies or tokenizers cannot be "
                f"compared; {option_hint(role, attr, value)}",
                where=f"engines.{attr}",
            )


def check_oracle_matches(oracle: Any, engines: Mapping[str, Engine]) -> None:
    """The oracle's model must score the baseline's vocabulary."""
    base = engines["baseline"]
    if oracle.vocab_size != base.vocab_size:
        raise ConfigError(
            f"oracle model has a vocabulary of {oracle.vocab_size} but baseline {base.name!r} has {base.vocab_size}: "
            "it is not the baseline's target model (pass --oracle-model DIR, or --no-oracle)",
            where="oracle.model",
        )


def oracle_sources(config: RunConfig, engines: Mapping[str, Engine]) -> tuple[ModelSource, ModelSource | None]:
    """Where :func:`make_oracle`'s target and draft come from, for worker processes to build the same oracle."""
    if config.oracle_model is not None:
        target = ModelSource(path=config.oracle_model)
    elif _loaded_model(engines["baseline"], "model") is not None:
        target = ModelSource(engine_role="baseline", engine_attribute="model")
    else:
        target = ModelSource()
    if config.oracle_draft == "auto":
        has = _loaded_model(engines["candidate"], "draft") is not None
        draft = ModelSource(engine_role="candidate", engine_attribute="draft") if has else None
    elif config.oracle_draft == "bundled":
        from speceq.models import DRAFT_DIR

        draft = ModelSource(path=str(DRAFT_DIR))
    else:
        draft = None if config.oracle_draft is None else ModelSource(path=config.oracle_draft)
    return target, draft


def oracle_requests(cases: Sequence[Case], collected: Collected) -> list[tuple[str, Any, SampleBatch, Any]]:
    """The ``oracle.score`` requests :func:`speceq.pipeline.analysis.analyse_run` makes, in its order (case by case:
    the baseline's first rows for its A/A check, then the candidate's rows)."""
    from speceq.pipeline.analysis import BASELINE_AA_ROWS

    out = []
    for case in cases:
        if case.params.greedy:
            continue
        base, cand = collected.baseline[case.case_id], collected.candidate[case.case_id]
        head = SampleBatch(tokens=base.tokens[:BASELINE_AA_ROWS], lengths=base.lengths[:BASELINE_AA_ROWS],
                           prompt_index=base.prompt_index[:BASELINE_AA_ROWS])
        out += [(case.case_id, case.prompts, head, case.params), (case.case_id, case.prompts, cand, case.params)]
    return out


def make_oracle(config: RunConfig, engines: Mapping[str, Engine]) -> Any | None:
    """The target oracle of ``config`` (None when off); see :class:`RunConfig` for the defaults."""
    if not config.oracle:
        return None
    if config.oracle_server is not None:
        from speceq.oracles.server import ServerOracle

        base = engines["baseline"]
        return ServerOracle(config.oracle_server, vocab_size=base.vocab_size, eos_token_id=base.eos_token_id,
                            top_logprobs=config.oracle_top_logprobs)
    from speceq.models.hf_utils import model_in_dtype
    from speceq.oracles.hf import TargetOracle

    target = config.oracle_model if config.oracle_model is not None else _loaded_model(engines["baseline"], "model")
    target = model_in_dtype(target, config.oracle_dtype)
    if config.oracle_draft == "auto":
        draft = model_in_dtype(_loaded_model(engines["candidate"], "draft"), config.oracle_dtype)
    elif config.oracle_draft == "bundled":
        from speceq.models import DRAFT_DIR

        draft = DRAFT_DIR
    else:
        draft = config.oracle_draft
    # the oracle masks the EOS the baseline masks (ignore_eos): the baseline's, learnt from its model
    return TargetOracle(target, draft=draft, eos_token_id=engines["baseline"].eos_token_id,
                        share_prefix=config.oracle_share_prefix, dtype=config.oracle_dtype)


def _apply_threads(threads: int | None) -> None:
    """Make ``threads`` the torch thread count of this process and of every engine built afterwards.

    None leaves it to the engines (``$SPECEQ_TORCH_THREADS``, else 1; see
    :func:`speceq.models.torch_utils.configure_threads`) and does not import torch.
    """
    if threads is None:
        return
    from speceq.models.torch_utils import THREADS_ENV, configure_threads

    os.environ[THREADS_ENV] = str(threads)  # read by the project's engines and the oracle
    configure_threads(threads)


def run(config: RunConfig, cases: Sequence[Case], *, engines: Mapping[str, Engine] | None = None) -> RunResult:
    """Plan, collect, analyse and write one run; return its result.

    ``engines`` ({"baseline": ..., "candidate": ...}) replaces resolving the specs of
    ``config`` (for library use and tests); the specs are still recorded.
    """
    check_cases(cases)
    _apply_threads(config.threads)
    check_sample_sizes(config, cases)
    specs = None if engines is not None else {r: (getattr(config, r), dict(getattr(config, f"{r}_options")))
                                               for r in ROLES}
    with ExecutorSession(executor=config.executor, workers=config.workers, ray_address=config.ray_address,
                         threads=config.threads, engines=engines, specs=specs) as session:
        # worker processes load their engines while this process loads its own
        session.prestart(pending=len(ROLES) * sum(len(slice_sizes(c.samples or config.samples, config.chunk_size))
                                                  for c in cases))
        engines = dict(engines) if engines is not None else resolve_engines(config)
        session.set_engines(engines)
        check_engines_comparable(engines)
        if config.oracle and config.oracle_server is not None:  # refuse what the server cannot score before sampling
            from speceq.oracles.server import check_server_cases

            check_server_cases(cases, config.oracle_top_logprobs, engines["baseline"].vocab_size)
        described = engine_identities(config, engines)
        seeds = {"run_seed": config.seed, "derivation": "speceq.pipeline.runner.chunk_seed(run_seed, role, case_id, slice)"}
        provenance = collect_provenance(seeds=seeds, engines=described, settings=config.settings(),
                                        extra={"cases": [c.to_dict() for c in cases], "status": "collecting"})
        config.out_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(config.out_dir / PROVENANCE_FILE, provenance)
        collected = collect(config, cases, engines, specs=specs, session=session)
        print(f"speceq: {collection_summary(collected, described)}", file=sys.stderr, flush=True)
        provenance = {**provenance, "status": "complete", "finished": utc_now(),
                      "chunks": {"total": collected.chunks_total, "reused": collected.chunks_reused,
                                 "sampled": collected.chunks_sampled}, "executor": collected.executor}
        oracle = make_oracle(config, engines)
        if oracle is not None:
            check_oracle_matches(oracle, engines)
            provenance["oracle"] = oracle.describe()
            # the analysis's score requests go to the workers, if any; same TokenScores bit for bit
            target, draft = oracle_sources(config, engines)
            scorer = session.prefetch_scores(oracle, oracle_requests(cases, collected), target=target, draft=draft)
            provenance["oracle_scoring"] = session.description if scorer is not oracle else "serial, in this process"
            oracle = scorer
        result = _analyse(config, cases, collected, {r: described[r]["config"] for r in ROLES}, oracle, provenance)
    result_json = (result.to_json() + "\n").encode("utf-8")
    atomic_write(config.out_dir / RESULT_FILE, lambda f: f.write(result_json))
    write_json_atomic(config.out_dir / PROVENANCE_FILE, provenance)
    return result


def _analyse(config: RunConfig, cases: Sequence[Case], collected: Collected, engine_configs: Mapping[str, Any],
             oracle: Any | None, provenance: Mapping[str, Any]) -> RunResult:
    """The one call into the analysis."""
    from speceq.pipeline.analysis import analyse_run

    return analyse_run(
        cases, collected.baseline, collected.candidate, oracle=oracle, alpha=config.alpha,
        tolerance=config.tolerance, seed=config.seed, engines=engine_configs,
        provenance=provenance, progress=config.progress, near_tie_nats=config.near_tie_nats,
    )
