"""Greedy (temperature 0) forensics: exact equality and the first divergence.

A correct speculative engine at temperature 0 emits exactly the target's argmax sequence,
so baseline and candidate rows of the same prompt must be equal token for token. When they
differ, the first divergence is classified with the target's raw top-2 log-probability
margin at that prefix: a margin within ``near_tie_threshold`` nats is a numerical near-tie
(batched verification runs a different floating-point computation, which may flip an argmax
between two almost equal logits); a larger margin is a real mismatch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Default near-tie threshold in nats (top-1 minus top-2 log-probability). float32
#: logits of the bundled models differ between batched and unbatched graphs by ~1e-5;
#: 1e-3 nats leaves two orders of magnitude of slack and is still far below any margin a
#: real bug needs to flip an argmax on a trained model.
NEAR_TIE_NATS = 1e-3


@dataclass(frozen=True, slots=True, kw_only=True)
class FirstDivergence:
    """Where two token rows first differ (``position`` counts generated tokens)."""

    position: int
    baseline_token: int
    candidate_token: int
    prefix: tuple[int, ...]  # generated tokens before the divergence (shared by both rows)


def first_divergence(baseline_row: np.ndarray, candidate_row: np.ndarray) -> FirstDivergence | None:
    """First position where the rows differ, or None when equal (lengths included).

    Rows hold generated token ids only; a row that ends earlier differs at its end,
    with token -1 standing for "ended".
    """
    a = np.asarray(baseline_row, dtype=np.int64)
    b = np.asarray(candidate_row, dtype=np.int64)
    m = max(len(a), len(b))
    a2 = np.full(m, -1, dtype=np.int64)
    b2 = np.full(m, -1, dtype=np.int64)
    a2[: len(a)] = a
    b2[: len(b)] = b
    diff = np.flatnonzero(a2 != b2)
    if diff.size == 0:
        return None
    t = int(diff[0])
    return FirstDivergence(position=t, baseline_token=int(a2[t]), candidate_token=int(b2[t]), prefix=tuple(int(x) for x in a2[:t]))


def classify_margin(margin: float | None, threshold: float = NEAR_TIE_NATS) -> str:
    """``"near-tie"`` when the target's top-2 margin (nats) is within threshold, else ``"mismatch"``.

    An unknown margin (no oracle) is reported as ``"unexplained"``.
    """
    if margin is None or not np.isfinite(margin):
        return "unexplained"
    return "near-tie" if margin <= threshold else "mismatch"
