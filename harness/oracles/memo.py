"""An oracle that scores each distinct sample row once: several runs of one process share the scoring.

Runs that reuse another run's stored samples (the real-model job's A/A and mutant runs reuse
the baseline rows of its ``reference`` run) would have the oracle score those rows again.
:class:`RememberingOracle` wraps any oracle and keeps the scores of every row it has scored,
keyed by the row's prompt, its generated tokens and the sampling parameters, so a row is
scored once per process however many runs or cases ask for it. The law it answers with is the
wrapped oracle's; only which rows are scored together in one forward pass changes, so the
numbers may differ from a fresh scoring in the last float bits (as batching does).

Memory: the per-token fields of every scored row (about 20 floats per generated token), kept
for the wrapper's lifetime.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from speceq.engines.base import SampleBatch
from speceq.oracles.protocol import Oracle
from speceq.stats.scores import TokenScores

if TYPE_CHECKING:
    from speceq.core.params import SamplingParams

RowKey = tuple[tuple[int, ...], tuple[int, ...], "SamplingParams"]


class RememberingOracle:
    """``oracle``'s scores, each distinct (prompt, generated tokens, params) row scored once.

    ``scored_rows`` / ``reused_rows``: rows sent to the wrapped oracle / answered from memory,
    over the wrapper's lifetime. Every other member passes through to ``oracle``.
    """

    def __init__(self, oracle: Oracle) -> None:
        self.inner = oracle
        self.vocab_size = oracle.vocab_size
        self.eos_token_id = oracle.eos_token_id
        self._rows: dict[RowKey, TokenScores] = {}
        self.scored_rows = 0
        self.reused_rows = 0

    @property
    def has_draft(self) -> bool:
        return self.inner.has_draft

    def knows_full_law(self, params: SamplingParams) -> bool:
        return self.inner.knows_full_law(params)

    def next_token_probs(self, prefixes: Sequence[Sequence[int]], params: SamplingParams) -> np.ndarray:
        return self.inner.next_token_probs(prefixes, params)

    def raw_top2_margin(self, prefixes: Sequence[Sequence[int]]) -> np.ndarray:
        return self.inner.raw_top2_margin(prefixes)

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "remembers_scored_rows": True}

    def score(self, prompts: Sequence[Sequence[int]], batch: SampleBatch, params: SamplingParams) -> TokenScores:
        """Every generated token of ``batch`` scored, rows already scored (by any earlier call) taken from memory."""
        lengths = np.asarray(batch.lengths, dtype=np.int64)
        if batch.rows == 0 or int(lengths.sum()) == 0:
            return self.inner.score(prompts, batch, params)
        index = np.asarray(batch.prompt_index, dtype=np.int64)
        keys = [(tuple(int(t) for t in prompts[int(index[r])]), tuple(int(t) for t in batch.tokens[r, : lengths[r]]),
                 params) for r in range(batch.rows)]
        missing: dict[RowKey, int] = {}  # first row of each key not in memory
        for r, key in enumerate(keys):
            if key not in self._rows and key not in missing:
                missing[key] = r
        if missing:
            rows = np.fromiter(missing.values(), dtype=np.int64, count=len(missing))
            sub = SampleBatch(tokens=batch.tokens[rows], lengths=lengths[rows], prompt_index=index[rows])
            scores = self.inner.score(prompts, sub, params)
            for j, key in enumerate(missing):
                self._rows[key] = _with_row(scores.select(scores.row == j), 0)
        self.scored_rows += len(missing)
        self.reused_rows += batch.rows - len(missing)
        return TokenScores.concatenate([_with_row(self._rows[key], r) for r, key in enumerate(keys)])


def _with_row(scores: TokenScores, row: int) -> TokenScores:
    """``scores`` (one row's tokens) with their ``row`` field set to ``row``."""
    import dataclasses

    return dataclasses.replace(scores, row=np.full(len(scores.token), row, dtype=np.asarray(scores.row).dtype))


__all__ = ["RememberingOracle"]
