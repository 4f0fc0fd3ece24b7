"""The chunks of a run: seed slices of every case and engine, their seeds and store keys.

Every case is cut into seed slices of at most ``chunk_size`` samples; one chunk = (role,
case, slice). Its seed is :func:`chunk_seed` of (run seed, role, case id, slice) (the case's own
``seed`` in place of the run seed when it sets one: :func:`case_run_seed`), so a rerun
draws the same samples, and the last slice of a case is stored under its own sample count, so
growing or shrinking ``samples`` samples only what the new plan lacks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from speceq.core.credentials import redact
from speceq.engines.base import Engine, SampleBatch, SampleRequest
from speceq.inputs.cases import Case
from speceq.pipeline.collect.code_identity import engine_code_identity
from speceq.pipeline.config import RunConfig
from speceq.store import CONTROL_ROLE, ROLES, STORE_FORMAT, ChunkKey

_ROLE_CODES = {"baseline": 1, "candidate": 2, CONTROL_ROLE: 3}


def case_run_seed(run_seed: int, case: Case) -> int:
    """The seed a case's chunk seeds derive from: the case's own ``seed`` when it sets one, else the run's."""
    return run_seed if case.params.seed is None else case.params.seed


def chunk_seed(run_seed: int, role: str, case_id: str, slice_index: int) -> int:
    """The 63-bit seed of one chunk.

    ``numpy.random.SeedSequence(entropy=run_seed, spawn_key=(role code, 4 words of
    SHA-256(case id), slice_index))``, first two 32-bit words of its state, top 63 bits.
    Baseline, candidate and a numerics control get independent streams (role code 1, 2 and 3),
    so the two-sample tests compare independent draws; every chunk's seed is far from every other one (nearby
    integer seeds are not always independent, e.g. vLLM with ``n > 1``).
    """
    digest = hashlib.sha256(case_id.encode("utf-8")).digest()
    words = [int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4)]
    ss = np.random.SeedSequence(entropy=run_seed, spawn_key=(_ROLE_CODES[role], *words, slice_index))
    lo, hi = (int(x) for x in ss.generate_state(2, dtype=np.uint32))
    return ((hi << 32) | lo) >> 1


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


def run_roles(engines: Mapping[str, Engine]) -> tuple[str, ...]:
    """The engine roles of a run, in sampling order: baseline, candidate, and the control when there is one."""
    return ROLES + ((CONTROL_ROLE,) if CONTROL_ROLE in engines else ())


def role_spec(config: RunConfig, role: str) -> tuple[str, dict[str, Any]]:
    """(spec, options) of ``role``'s engine in ``config`` (the control's: :meth:`RunConfig.control_spec`)."""
    if role == CONTROL_ROLE:
        return config.control_spec()
    return getattr(config, role), dict(getattr(config, f"{role}_options"))


def engine_identities(config: RunConfig, engines: Mapping[str, Engine]) -> dict[str, dict[str, Any]]:
    """Per role: the spec, options, name, ``describe()`` config and code identity of its engine (JSON-able).

    Credentials (a password in a URL option, an ``api_key`` option) are masked: they never reach a chunk
    file, the provenance or the result, and changing them does not change what is stored.
    """
    return {r: redact({"spec": role_spec(config, r)[0], "options": role_spec(config, r)[1],
                "name": engines[r].name, "config": engines[r].describe(),
                "code": engine_code_identity(engines[r])}) for r in run_roles(engines)}


def plan_chunk(config: RunConfig, case: Case, role: str, index: int, n: int,
               engine_ids: Mapping[str, Mapping[str, Any]], *, schedule: str | None = None) -> ChunkPlan:
    """Slice ``index`` (``n`` samples) of ``case`` for ``role``: its seed and store key, for both loops.

    The key's identity holds everything the samples depend on (store format, engine identity
    with its code, the case without its display text and tokenizer name, run seed, chunk seed, slice, size).
    ``schedule`` None: a fixed-size chunk, whose file name also carries its size (a changed
    budget re-plans the last slice under its new size); a schedule name (sequential runs):
    recorded in the identity, and the slice sizes are the schedule's own.
    """
    base = case_run_seed(config.seed, case)
    seed = chunk_seed(base, role, case.case_id, index)
    case_doc = {k: v for k, v in case.to_dict().items() if k not in ("text", "tokenizer")}  # display only
    identity = {"format": STORE_FORMAT, "role": role, "engine": engine_ids[role], "case": case_doc,
                "run_seed": base, "seed": seed, "slice": index, "n": n}
    if schedule is not None:
        identity["schedule"] = schedule
    key = ChunkKey.build(role, case.case_id, index, identity, samples=n if schedule is None else None)
    return ChunkPlan(role, case, index, n, seed, key)


def role_samples(config: RunConfig, case: Case, role: str) -> int:
    """Samples of ``case`` that ``role`` draws in a fixed-size run: the case's (or the run's) budget; the
    numerics control ``config.control_samples`` of it (its first slices are those of a smaller ratio's run)."""
    samples = case.samples or config.samples
    return config.control_samples(samples) if role == CONTROL_ROLE else samples


def plan_chunks(config: RunConfig, cases: Sequence[Case], engines: Mapping[str, Engine]) -> list[ChunkPlan]:
    """Every chunk of a fixed-size run, case by case, baseline before candidate (then the control), slices in order."""
    ident = engine_identities(config, engines)
    return [plan_chunk(config, case, role, i, n, ident)
            for case in cases for role in run_roles(engines)
            for i, n in enumerate(slice_sizes(role_samples(config, case, role), config.chunk_size))]


def concat_batches(batches: Sequence[SampleBatch]) -> SampleBatch:
    """Rows of several chunks in order; counts and times summed (None if any chunk lacks them).

    ``info["chunk_rows"]``: the rows of each chunk in order. One chunk is one ``sample()`` call (one
    request), so this is where each row's call is known: :func:`row_calls` reads it back.
    """

    def total(name: str) -> Any:
        vals = [getattr(b, name) for b in batches]
        return None if any(v is None for v in vals) else sum(vals)

    return SampleBatch(
        tokens=np.concatenate([b.tokens for b in batches]),
        lengths=np.concatenate([b.lengths for b in batches]),
        prompt_index=np.concatenate([b.prompt_index for b in batches]),
        drafted_tokens=total("drafted_tokens"), accepted_tokens=total("accepted_tokens"),
        verify_steps=total("verify_steps"), wall_time_s=total("wall_time_s"),
        info={"chunks": len(batches), CHUNK_ROWS: tuple(int(b.rows) for b in batches)},
    )


#: The ``SampleBatch.info`` key of the rows of each joined chunk (:func:`concat_batches`).
CHUNK_ROWS = "chunk_rows"


def row_calls(batch: SampleBatch) -> np.ndarray:
    """Per row of ``batch``, the index of the ``sample()`` call (chunk) it came from: int64 ``[rows]``.

    Read from ``info["chunk_rows"]`` of :func:`concat_batches`; a batch without it (one engine call,
    or joined elsewhere) is one call (all zeros).
    """
    sizes = batch.info.get(CHUNK_ROWS) if isinstance(batch.info, dict) else None
    if not sizes or sum(sizes) != batch.rows:
        return np.zeros(batch.rows, dtype=np.int64)
    return np.repeat(np.arange(len(sizes), dtype=np.int64), np.asarray(sizes, dtype=np.int64))


__all__ = ["CHUNK_ROWS", "ChunkPlan", "case_run_seed", "chunk_seed", "concat_batches", "engine_identities", "plan_chunk",
           "plan_chunks", "role_samples", "role_spec", "row_calls", "run_roles", "slice_sizes"]
