"""Oracle scoring through the executors: the same :class:`~speceq.stats.scores.TokenScores`, bit for bit.

:meth:`speceq.oracles.hf.TargetOracle.score` sorts a sample set's rows by length and runs one
forward pass per batch of rows. Scoring in worker processes (or Ray tasks) must not change a
single bit of its numbers, so the work is cut *along those very batches*: every
:class:`OracleScoreTask` carries whole forward batches of the serial call (consecutive in its
sorted order), and a worker scores them with the public ``score(...)`` of its own oracle.
Inside a task, ``score`` sorts and batches those rows exactly as the serial call did, so
every forward pass sees the same ids, mask and width, and every per-token number comes out
identical (tested against serial scoring). The driver puts the parts back in row order.

A worker builds its oracle once from an :class:`OracleRecipe`: the target and draft are a
model folder, the bundled model, or the loaded model of the worker's own engine (what
:func:`speceq.oracles.build.make_oracle` takes in the driver), with the same EOS id and settings.

:class:`PrefetchedOracle` is what the analysis sees: the driver's oracle, whose ``score`` answers
from results scored ahead in the workers (waiting for them when needed) and scores anything
else itself.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from speceq.core.params import SamplingParams
from speceq.engines.base import Engine, SampleBatch
from speceq.oracles.build import ModelSource
from speceq.oracles.protocol import Oracle
from speceq.stats.scores import TokenScores

#: Rows of the serial call's forward batches (``TargetOracle.score``'s ``max_batch_rows`` default).
MAX_BATCH_ROWS = 256


@dataclass(frozen=True, slots=True)
class OracleRecipe:
    """How a worker builds the driver's :class:`~speceq.oracles.hf.TargetOracle` (models, EOS id, settings)."""

    target: ModelSource
    draft: ModelSource | None
    eos_token_id: Any
    share_prefix: bool = False
    device: str = "cpu"
    dtype: str = "float32"


@dataclass(frozen=True, slots=True)
class OracleScoreTask:
    """Whole forward batches of one ``score`` request: ``rows`` of the request's sample set."""

    request: str  # fingerprint of the request (prompts, rows, params)
    part: int
    case_id: str
    prompts: tuple[tuple[int, ...], ...]
    batch: SampleBatch  # the task's rows only, in their original order
    params: SamplingParams
    recipe: OracleRecipe
    rows: np.ndarray  # int64 indices of these rows in the request's sample set

    def label(self) -> str:
        return f"oracle · {self.case_id} · part {self.part}"


def request_fingerprint(prompts: Sequence[Sequence[int]], batch: SampleBatch, params: SamplingParams) -> str:
    """SHA-256 of what a ``score`` call scores (prompts, rows, sampling parameters)."""
    h = hashlib.sha256(repr(tuple(tuple(int(t) for t in p) for p in prompts)).encode("utf-8"))
    for a in (batch.tokens, batch.lengths, batch.prompt_index):
        arr = np.ascontiguousarray(np.asarray(a, dtype=np.int64))
        h.update(repr(arr.shape).encode("ascii"))
        h.update(arr.tobytes())
    h.update(repr(params).encode("utf-8"))
    return h.hexdigest()


def serial_batches(prompts: Sequence[Sequence[int]], batch: SampleBatch, vocab_size: int, *,
                   share_prefix: bool = False, max_batch_rows: int = MAX_BATCH_ROWS) -> list[list[int]]:
    """The rows of each forward batch of ``TargetOracle.score`` on ``batch``.

    Whole rows: all rows sorted by length, cut by the oracle's row and logits budgets. With
    ``share_prefix``: per distinct prompt (in increasing prompt index), the rows that
    generated something, sorted by generated length and cut the same way (rows without a
    generated token are scored by no forward pass and go with the first batch).
    """
    from speceq.oracles.hf import LOGITS_BUDGET, forward_batches  # the oracle's own batching: one rule, never a copy

    lengths = np.asarray(batch.lengths, dtype=np.int64)
    index = np.asarray(batch.prompt_index, dtype=np.int64)
    budget = max(1, LOGITS_BUDGET // vocab_size)
    if not share_prefix:
        sizes = [len(prompts[int(index[r])]) + max(int(lengths[r]) - 1, 0) for r in range(batch.rows)]
        order = sorted(range(batch.rows), key=lambda r: sizes[r])
        return forward_batches(order, sizes, max_batch_rows, budget)
    out: list[list[int]] = []
    for p in np.unique(index):
        rows = [int(r) for r in np.flatnonzero(index == p) if lengths[r] > 0]
        sizes = [int(lengths[r]) for r in rows]  # [last prompt token, generated tokens but the last]
        order = sorted(range(len(rows)), key=lambda j: sizes[j])
        out += [[rows[j] for j in chunk] for chunk in forward_batches(order, sizes, max_batch_rows, budget)]
    empty = [int(r) for r in np.flatnonzero(lengths == 0)]
    if empty:
        out = [empty + out[0], *out[1:]] if out else [empty]
    return out


def _take(batch: SampleBatch, rows: np.ndarray) -> SampleBatch:
    return SampleBatch(tokens=np.asarray(batch.tokens)[rows], lengths=np.asarray(batch.lengths)[rows],
                       prompt_index=np.asarray(batch.prompt_index)[rows])


def plan_score_tasks(case_id: str, prompts: Sequence[Sequence[int]], batch: SampleBatch, params: SamplingParams,
                     recipe: OracleRecipe, vocab_size: int, parts: int) -> list[OracleScoreTask]:
    """Cut one ``score`` request into at most ``parts`` tasks of whole serial forward batches (consecutive ones).

    With ``share_prefix`` each task also runs the prefill of its prompts once, as the serial
    call does per prompt: the same inputs, so the same cache, bit for bit.
    """
    request = request_fingerprint(prompts, batch, params)
    groups = serial_batches(prompts, batch, vocab_size, share_prefix=recipe.share_prefix)
    if not groups:
        return []
    weights = [sum(int(batch.lengths[r]) + 1 for r in g) for g in groups]
    target = sum(weights) / max(1, min(parts, len(groups)))
    cut: list[list[int]] = [[]]
    load = 0.0
    for g, w in zip(groups, weights, strict=True):
        if cut[-1] and load + w / 2 > target:  # consecutive batches, about equal tokens per task
            cut.append([])
            load = 0.0
        cut[-1].extend(g)
        load += w
    prompt_tuple = tuple(tuple(int(t) for t in p) for p in prompts)
    tasks = []
    for i, rows in enumerate(cut):
        idx = np.asarray(sorted(rows), dtype=np.int64)  # original order: score() sorts them as the serial call did
        tasks.append(OracleScoreTask(request, i, case_id, prompt_tuple, _take(batch, idx), params, recipe, idx))
    return tasks


def assemble_scores(batch: SampleBatch, parts: Sequence[tuple[np.ndarray, TokenScores]]) -> TokenScores:
    """The ``TokenScores`` of the whole sample set from the parts scored for its rows (row order, as serially)."""
    lengths = np.asarray(batch.lengths, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    n = int(offsets[-1])
    out: dict[str, np.ndarray | None] = {
        "row": np.repeat(np.arange(batch.rows, dtype=np.int64), lengths),
        "position": np.concatenate([np.zeros(0, np.int64), *(np.arange(k, dtype=np.int64) for k in lengths)]),
        "token": np.concatenate([np.zeros(0, np.int64),
                                 *(np.asarray(batch.tokens[r, : lengths[r]], dtype=np.int64) for r in range(batch.rows))]),
    }
    names = [f.name for f in fields(TokenScores) if f.name not in out]
    for rows, scores in parts:
        dest = np.concatenate([np.zeros(0, np.int64), *(np.arange(offsets[r], offsets[r + 1]) for r in rows)])
        for name in names:
            values = getattr(scores, name)
            if values is None:
                out.setdefault(name, None)
                continue
            if out.get(name) is None:
                out[name] = np.empty(n, dtype=values.dtype)
            out[name][dest] = values
    return TokenScores(**out)


# ---- worker side ------------------------------------------------------------------------------
_ORACLES: dict[str, Any] = {}  # per worker process: repr(recipe) -> oracle


def _model(source: ModelSource | None, engines: Mapping[str, Engine]) -> Any:
    if source is None or source.engine_role is None:
        return None if source is None else source.path
    return getattr(engines[source.engine_role], source.engine_attribute or "model")


def oracle_for(recipe: OracleRecipe, engine_recipes: Mapping[str, Any]) -> Any:
    """The worker's oracle of ``recipe``, built once per process (from its own engines' models when asked)."""
    key = repr(recipe)
    if key not in _ORACLES:
        from speceq.models.hf_utils import model_in_dtype
        from speceq.oracles.hf import TargetOracle
        from speceq.pipeline.collect.sampling import engine_for

        needed = {s.engine_role for s in (recipe.target, recipe.draft) if s is not None and s.engine_role}
        engines = {role: engine_for(engine_recipes[role]) for role in needed}
        # the worker's engines keep their own models: the oracle gets a copy when it needs another dtype
        target = model_in_dtype(_model(recipe.target, engines), recipe.dtype)
        draft = None if recipe.draft is None else model_in_dtype(_model(recipe.draft, engines), recipe.dtype)
        _ORACLES[key] = TargetOracle(target, draft=draft, device=recipe.device, dtype=recipe.dtype,
                                        eos_token_id=recipe.eos_token_id, share_prefix=recipe.share_prefix)
    return _ORACLES[key]


def score_task(task: OracleScoreTask, engine_recipes: Mapping[str, Any]) -> tuple[TokenScores, float]:
    """Worker side: score the task's rows with the public ``score``; returns (scores, seconds)."""
    t0 = time.perf_counter()
    scores = oracle_for(task.recipe, engine_recipes).score(task.prompts, task.batch, task.params)
    return scores, time.perf_counter() - t0


# ---- driver side ------------------------------------------------------------------------------
class PrefetchedOracle:
    """The driver's oracle with some ``score`` requests answered by workers (an :class:`~speceq.oracles.protocol.Oracle`).

    ``score`` of a request handed to :meth:`expect` waits for its parts and assembles them;
    any other ``score`` call, and every other member of the protocol, goes to the oracle itself.
    """

    def __init__(self, oracle: Oracle) -> None:
        self.oracle = oracle
        self._lock = threading.Condition()
        self._waiting: dict[str, tuple[SampleBatch, int]] = {}  # request -> (batch, parts)
        self._parts: dict[str, list[tuple[np.ndarray, TokenScores]]] = {}
        self._failed: BaseException | None = None
        #: seconds the workers spent scoring, and the driver spent waiting for them (benchmarks, logs)
        self.worker_seconds = 0.0
        self.wait_seconds = 0.0

    @property
    def vocab_size(self) -> int:
        return self.oracle.vocab_size

    @property
    def eos_token_id(self) -> int | None:
        return self.oracle.eos_token_id

    @property
    def has_draft(self) -> bool:
        return self.oracle.has_draft

    def knows_full_law(self, params: SamplingParams) -> bool:
        return self.oracle.knows_full_law(params)

    def next_token_probs(self, prefixes: Sequence[Sequence[int]], params: SamplingParams) -> np.ndarray:
        return self.oracle.next_token_probs(prefixes, params)

    def raw_top2_margin(self, prefixes: Sequence[Sequence[int]]) -> np.ndarray:
        return self.oracle.raw_top2_margin(prefixes)

    def describe(self) -> dict[str, Any]:
        return self.oracle.describe()

    def expect(self, request: str, batch: SampleBatch, parts: int) -> None:
        with self._lock:
            self._waiting[request] = (batch, parts)
            self._parts.setdefault(request, [])

    def deliver(self, task: OracleScoreTask, scores: TokenScores, seconds: float = 0.0) -> None:
        with self._lock:
            self.worker_seconds += seconds
            self._parts[task.request].append((task.rows, scores))
            self._lock.notify_all()

    def fail(self, error: BaseException) -> None:
        """Scoring in the workers stopped: waiting calls raise ``error``."""
        with self._lock:
            self._failed = error
            self._lock.notify_all()

    def score(self, prompts: Sequence[Sequence[int]], batch: SampleBatch, params: SamplingParams) -> TokenScores:
        request = request_fingerprint(prompts, batch, params)
        with self._lock:
            if request in self._waiting:
                expected = self._waiting[request][1]
                t0 = time.perf_counter()
                self._lock.wait_for(lambda: len(self._parts[request]) >= expected or self._failed is not None)
                self.wait_seconds += time.perf_counter() - t0
                if len(self._parts[request]) >= expected:
                    parts = self._parts.pop(request)
                    del self._waiting[request]
                    return assemble_scores(batch, parts)
                raise self._failed  # type: ignore[misc]
        return self.oracle.score(prompts, batch, params)


def oracle_recipe(oracle: Oracle, *, target: ModelSource, draft: ModelSource | None) -> OracleRecipe | None:
    """The recipe of a :class:`~speceq.oracles.hf.TargetOracle` built from these sources, or None for other oracles."""
    from speceq.oracles.hf import TargetOracle

    if type(oracle) is not TargetOracle or str(oracle.device) != "cpu":
        return None
    return OracleRecipe(target=target, draft=draft, eos_token_id=oracle.eos_token_id,
                        share_prefix=oracle.share_prefix, dtype=oracle.dtype)


OnScored = Callable[[OracleScoreTask, TokenScores], None]
