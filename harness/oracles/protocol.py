"""The oracle contract: what the analysis may ask of the target's exact law.

An oracle knows the target's processed next-token law (the same temperature, top-k and top-p
processing as the engines) after any prefix. Three implement it: the transformers oracle
(:class:`speceq.oracles.hf.TargetOracle`), a server's prompt log-probabilities
(:class:`speceq.oracles.server.ServerOracle`) and the run's prefetching wrapper that has some
scores computed by worker processes (:class:`speceq.pipeline.collect.oracle_tasks.PrefetchedOracle`).
The analysis and the sequential loop use only these members, never attribute probes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

    from speceq.core.params import SamplingParams
    from speceq.engines.base import SampleBatch
    from speceq.stats.scores import TokenScores


@runtime_checkable
class Oracle(Protocol):
    """The target's exact processed law, for scoring sampled tokens.

    vocab_size: logits per position (the token ids it can score). eos_token_id: the EOS id
    that ``ignore_eos`` masks (None: no EOS). has_draft: :meth:`score` also fills the draft
    fields of :class:`~speceq.stats.scores.TokenScores` (the draft-drift test runs).
    """

    vocab_size: int
    eos_token_id: int | None

    @property
    def has_draft(self) -> bool: ...

    def knows_full_law(self, params: SamplingParams) -> bool:
        """Whether the whole processed law is known for ``params`` (else only its top-K)."""
        ...

    def score(self, prompts: Sequence[Sequence[int]], batch: SampleBatch, params: SamplingParams) -> TokenScores:
        """Every generated token of ``batch`` scored against the processed law at its prefix."""
        ...

    def next_token_probs(self, prefixes: Sequence[Sequence[int]], params: SamplingParams) -> np.ndarray:
        """The processed next-token law after each prefix, ``[rows, vocab_size]``."""
        ...

    def raw_top2_margin(self, prefixes: Sequence[Sequence[int]]) -> np.ndarray:
        """Raw (T = 1) log-probability of the top-1 minus the top-2 next token after each prefix, nats."""
        ...

    def describe(self) -> dict[str, Any]:
        """JSON-able description for provenance."""
        ...


__all__ = ["Oracle"]
