"""Sample pools: an engine's samples of one case, drawn on demand in seeded chunks.

Power runs need R repetitions at each sample size n; repetition r uses samples
[r n, (r + 1) n) of the pool, so repetitions at one size are disjoint and independent.
The pool grows in chunks whose seeds derive from (run seed, pool label, chunk index), so a
rerun with the same seed draws the same samples whatever order sizes are asked in.
"""

from __future__ import annotations

import time
import zlib

import numpy as np

from speceq.engines.base import Engine, SampleBatch, SampleRequest, validate_batch
from speceq.inputs.cases import Case
from speceq.models.torch_utils import derive_seed
from speceq.pipeline.plan import CHUNK_ROWS, concat_batches, row_calls

#: Samples of the case's prompt drawn per chunk (companions get as many).
DEFAULT_CHUNK = 512


class SamplePool:
    """Samples of ``case`` (its prompt and companions) from ``engine``, grown on demand.

    Sizes count samples of the case's prompt; a sample is one round of rows (one row per
    prompt of the batch layout), so slices keep the engine's row layout.
    """

    def __init__(self, engine: Engine, case: Case, *, seed: int, label: str, chunk: int = DEFAULT_CHUNK) -> None:
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
            raise ValueError(f"`chunk` must be a positive integer, got {chunk!r}")
        self.engine = engine
        self.case = case
        self.seed = seed
        self.label = label
        self.chunk = chunk
        self.prompts = len(case.prompts)
        self._batches: list[SampleBatch] = []
        self._joined: SampleBatch | None = None
        self.sampling_seconds = 0.0

    @property
    def size(self) -> int:
        """Samples (rounds) drawn so far."""
        return sum(b.rows for b in self._batches) // self.prompts

    def ensure(self, samples: int) -> None:
        """Draw chunks until the pool holds at least ``samples`` samples."""
        while self.size < samples:
            index = len(self._batches)
            request = SampleRequest(
                prompts=tuple(tuple(p) for p in self.case.prompts), params=self.case.params, n=self.chunk,
                seed=derive_seed(self.seed, zlib.crc32(self.label.encode()), index), batch_size=self.case.batch_size,
            )
            t0 = time.perf_counter()
            batch = self.engine.sample(request)
            self.sampling_seconds += time.perf_counter() - t0
            validate_batch(batch, request, self.engine, case_id=self.case.case_id)
            self._batches.append(batch)
            self._joined = None

    def take(self, start: int, n: int) -> SampleBatch:
        """Samples [start, start + n) (rows of every prompt), drawing more when needed."""
        if start < 0 or n < 1:
            raise ValueError(f"expected start >= 0 and n >= 1, got start={start}, n={n}")
        self.ensure(start + n)
        if self._joined is None:
            self._joined = concat_batches(self._batches)
        rows = slice(start * self.prompts, (start + n) * self.prompts)
        j = self._joined
        calls = row_calls(j)[rows]  # keep which sample() call each row came from (the row-independence test's groups)
        cuts = np.flatnonzero(np.diff(calls)) + 1
        sizes = tuple(int(x) for x in np.diff(np.concatenate([[0], cuts, [calls.size]])))
        return SampleBatch(tokens=j.tokens[rows], lengths=j.lengths[rows], prompt_index=j.prompt_index[rows],
                           info={CHUNK_ROWS: sizes})

    def rep(self, r: int, n: int) -> SampleBatch:
        """Repetition ``r`` at size ``n``: samples [r n, (r + 1) n)."""
        return self.take(r * n, n)

    def first_tokens(self, start: int, n: int) -> np.ndarray:
        """First generated token of the case prompt's rows of samples [start, start + n), int64 ``[n]``."""
        batch = self.take(start, n)
        return batch.tokens[np.asarray(batch.prompt_index) == 0, 0].astype(np.int64)
