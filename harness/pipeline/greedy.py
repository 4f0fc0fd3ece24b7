"""Greedy (temperature 0) forensics: exact equality and the first divergence.

A correct speculative engine at temperature 0 emits exactly the target's argmax sequence,
so baseline and candidate rows of the same prompt must be equal token for token. When they
differ, the first divergence is classified with the target's raw top-2 log-probability
margin at that prefix: a margin within ``near_tie_threshold`` nats is a numerical near-tie
(batched verification runs a different floating-point computation, which may flip an argmax
between two almost equal logits); a larger margin is a real mismatch.

The threshold is a setting (``RunConfig.near_tie_nats``, ``--near-tie-nats``). The default
1e-3 nats was measured on float32 CPU kernels, where batched and unbatched logits of the
bundled models differ by ~1e-5. bf16 GPU kernels move logits by more than 1e-2, so runs
against bf16 engines need a threshold of about 1e-2 (or more: measure it with
``benchmarks/gpu/check.py``).

:func:`compare_greedy_rows` compares every row pair of every prompt of the batch and
classifies EVERY diverging row (callers cap only what they display).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from speceq.core.defaults import NEAR_TIE_NATS

#: Prefixes scored per call when classifying divergences.
_MARGIN_BATCH = 256


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


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassifiedDivergence:
    """One distinct first divergence (prompt, position, tokens, prefix) and its class.

    rows: how many row pairs share it. margin: the target's raw top-2 margin (nats) at the
    prefix, None without an oracle.
    """

    prompt_index: int
    divergence: FirstDivergence
    margin: float | None
    classification: str
    rows: int


@dataclass(frozen=True, slots=True, kw_only=True)
class GreedyComparison:
    """Row-by-row comparison of greedy rows over every prompt of a batch.

    divergences: every distinct first divergence, real mismatches first, then unexplained,
    then near-ties (each group by descending margin). case_rows / case_rows_diverging: row
    pairs of prompt 0 (the case's prompt) compared and diverging.
    """

    rows_compared: int
    rows_equal: int
    case_rows: int
    case_rows_diverging: int
    near_tie_nats: float
    divergences: tuple[ClassifiedDivergence, ...] = ()

    def rows_classified(self, classification: str) -> int:
        """Diverging row pairs whose first divergence has this classification."""
        return sum(d.rows for d in self.divergences if d.classification == classification)


def _check_threshold(near_tie_nats: object) -> float:
    if isinstance(near_tie_nats, bool) or not isinstance(near_tie_nats, (int, float)) or not 0 <= near_tie_nats < np.inf:
        raise ValueError(f"`near_tie_nats` must be a finite number of nats >= 0, got {near_tie_nats!r}")
    return float(near_tie_nats)


def compare_greedy_rows(
    rows: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
    prompts: Sequence[Sequence[int]],
    margin_of: Callable[[list[list[int]]], np.ndarray] | None,
    near_tie_nats: float = NEAR_TIE_NATS,
) -> GreedyComparison:
    """Compare baseline row i with candidate row i of every prompt; classify every divergence.

    rows[j] = (baseline tokens, baseline lengths, candidate tokens, candidate lengths) of
    prompt j (token arrays ``[rows, max_new_tokens]`` padded with -1). ``margin_of(prefixes)``
    returns the target's raw top-2 margin (nats) after each full prefix (prompt + generated
    tokens); None when no oracle is available (divergences are then "unexplained").
    """
    threshold = _check_threshold(near_tie_nats)
    if len(rows) != len(prompts):
        raise ValueError(f"`rows` has {len(rows)} prompts, `prompts` {len(prompts)}")
    found: dict[tuple, list] = {}  # key -> [prompt, divergence, row count]
    compared = equal = case_rows = case_div = 0
    for j, (ta, la, tb, lb) in enumerate(rows):
        pairs = min(len(la), len(lb))
        compared += pairs
        case_rows += pairs if j == 0 else 0
        for r in range(pairs):
            d = first_divergence(ta[r, : la[r]], tb[r, : lb[r]])
            if d is None:
                equal += 1
                continue
            case_div += 1 if j == 0 else 0
            key = (j, d.position, d.baseline_token, d.candidate_token, d.prefix)
            if key in found:
                found[key][2] += 1
            else:
                found[key] = [j, d, 1]
    entries = list(found.values())
    margins: list[float | None] = [None] * len(entries)
    if margin_of is not None and entries:
        prefixes = [list(prompts[j]) + list(d.prefix) for j, d, _ in entries]
        values = np.concatenate([np.asarray(margin_of(prefixes[i : i + _MARGIN_BATCH]), dtype=np.float64)
                                 for i in range(0, len(prefixes), _MARGIN_BATCH)])
        margins = [float(v) for v in values]
    classified = [
        ClassifiedDivergence(prompt_index=j, divergence=d, margin=m, classification=classify_margin(m, threshold), rows=n)
        for (j, d, n), m in zip(entries, margins)
    ]
    rank = {"mismatch": 0, "unexplained": 1, "near-tie": 2}
    classified.sort(key=lambda c: (rank[c.classification], -(c.margin or 0.0)))
    return GreedyComparison(rows_compared=compared, rows_equal=equal, case_rows=case_rows, case_rows_diverging=case_div,
                            near_tie_nats=threshold, divergences=tuple(classified))
