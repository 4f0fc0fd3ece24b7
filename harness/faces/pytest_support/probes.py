"""Engine probes of the suites: a prompt sampled alone, and same-seed repeatability.

:class:`SoloEngine` wraps an engine so that every prompt of a request is sampled in its own
requests, one row per batch: the law of "this prompt alone". Compared (as baseline) with
the same engine on a batch that mixes prompts of different lengths (as candidate), any
difference is a batch-context bug (padding, position ids, ragged acceptance, row mixing).

:func:`repeatability` samples one request twice with the same seed and counts the rows that
differ. Identical rows are the norm for a seeded engine, but a difference is a "different
draw" (nondeterministic kernels, a server that ignores the seed), never a failure by itself.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from speceq.engines.base import Engine, SampleBatch, SampleRequest, check_sampling_support, validate_batch
from speceq.engines.function import prompt_seed
from speceq.errors import ConfigError


class SoloEngine:
    """``inner`` with every prompt sampled alone, ``batch_size`` rows of it per batch (default 1)."""

    def __init__(self, inner: Engine, *, batch_size: int = 1) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"expected an integer >= 1, got {batch_size!r}", where="solo engine.batch_size")
        self.inner = inner
        self.batch_size = batch_size
        self.name = f"{inner.name} (alone)"
        self.model = getattr(inner, "model", None)  # the oracle reuses a loaded target (speceq.pipeline.runner.make_oracle)
        self.vocab_size = inner.vocab_size
        self.eos_token_id = inner.eos_token_id

    def describe(self) -> dict[str, Any]:
        return {"engine": "solo", "batch_size": self.batch_size, "inner": self.inner.describe()}

    def sample(self, request: SampleRequest) -> SampleBatch:
        """Sample each prompt in its own request (seed from the request seed and prompt index)."""
        start = time.perf_counter()
        P, L = len(request.prompts), request.params.max_new_tokens
        layout = request.rows()
        tokens = np.empty((len(layout), L), dtype=np.int64)
        lengths = np.empty(len(layout), dtype=np.int64)
        counts: dict[str, list[int | None]] = {"drafted_tokens": [], "accepted_tokens": [], "verify_steps": []}
        for i, prompt in enumerate(request.prompts):
            sub = SampleRequest(prompts=(prompt,), params=request.params, n=request.n,
                                seed=prompt_seed(request.seed, i), batch_size=self.batch_size)
            batch = self.inner.sample(sub)
            validate_batch(batch, sub, self.inner)
            rows = np.arange(i, len(layout), P)  # n rounds of every prompt: rows i, i+P, ...
            tokens[rows] = batch.tokens
            lengths[rows] = batch.lengths
            for name, values in counts.items():
                values.append(getattr(batch, name))

        def total(values: list[int | None]) -> int | None:
            return None if any(v is None for v in values) else int(sum(v for v in values if v is not None))

        return SampleBatch(tokens=tokens, lengths=lengths, prompt_index=layout,
                           **{name: total(v) for name, v in counts.items()},
                           wall_time_s=time.perf_counter() - start)


@dataclass(frozen=True, slots=True, kw_only=True)
class Repeatability:
    """Same request, same seed, sampled twice: how many rows came out identical."""

    engine: str
    case_id: str
    seed: int
    rows: int
    identical_rows: int

    @property
    def repeatable(self) -> bool:
        return self.identical_rows == self.rows

    def summary(self) -> str:
        head = f"same-seed repeatability of {self.engine!r} on case {self.case_id!r} (seed {self.seed}): "
        if self.repeatable:
            return head + f"all {self.rows} rows identical"
        return (head + f"{self.rows - self.identical_rows} of {self.rows} rows differ: a different draw with the "
                "same seed (information, not a failure)")


def repeatability(engine: Engine, request: SampleRequest, *, case_id: str) -> Repeatability:
    """Sample ``request`` twice and compare the rows token for token (lengths included).

    A request whose parameters set a field ``engine`` does not declare (``seed`` among them) is refused
    first (ConfigError naming the case, the field and the engine).
    """
    check_sampling_support(engine, request.params, case_id)
    first = engine.sample(request)
    validate_batch(first, request, engine, case_id=case_id)
    second = engine.sample(request)
    validate_batch(second, request, engine, case_id=case_id)
    same = (first.lengths == second.lengths) & (first.tokens == second.tokens).all(axis=1)
    return Repeatability(engine=engine.name, case_id=case_id, seed=request.seed, rows=int(same.size),
                         identical_rows=int(same.sum()))
