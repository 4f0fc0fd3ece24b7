"""Hard failures as data: events impossible under equivalence, each a record with its token ids.

The analysis finds them; :func:`speceq.verdicts.reasons.failure_lines` words them (token labels
included) for every face. A record holds ids, never text: the prefix is the prompt's ids followed by
the row's tokens before ``position``, in a vocabulary of ``vocab_size`` ids.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any


class FailureKind(enum.StrEnum):
    """What made a case ``shifted`` without statistics."""

    ZERO_PROBABILITY = "zero probability"  # candidate rows with a token of oracle probability 0, the baseline none
    OUTSIDE_MARGIN = "outside margin"  # a token every law within the numerics margin of the oracle's excludes
    GREEDY_MISMATCH = "greedy mismatch"  # greedy rows differ where the target's top-2 margin is no near-tie
    OFF_ARGMAX = "off argmax"  # a diverged greedy row, teacher-forced, leaves the target's argmax path
    LEAVES_GRAMMAR = "leaves the grammar"  # a candidate row holds a token its case's grammar does not allow there


@dataclass(frozen=True, slots=True, kw_only=True)
class HardFailure:
    """One impossible event, with where it happened.

    prompt / position / token: which prompt of the batch, which generated position, the candidate's
    token there; prefix: the prompt's ids then the row's generated tokens before ``position``;
    vocab_size: the vocabulary the ids belong to (faces decode the bundled byte vocabulary, show ids
    otherwise). row: the candidate row (None for a greedy mismatch, which ``rows`` row pairs share);
    baseline_token: the baseline's token at a greedy mismatch. margin_nats: the target's top-2
    margin (greedy kinds) or the token's exclusion margin (``outside margin``; inf: no finite logit
    error admits it); threshold_nats: the near-tie threshold or the support margin it exceeded.

    The counts of the event's group ride on its first record: rows_flagged of rows_total candidate
    rows, the baseline's baseline_rows rows holding none, and the exact p of the support comparison
    (``zero probability``); total: distinct greedy mismatches in all, when more exist than are recorded.
    """

    kind: FailureKind
    prompt: int
    position: int
    token: int
    prefix: tuple[int, ...]
    vocab_size: int
    row: int | None = None
    baseline_token: int | None = None
    margin_nats: float | None = None
    threshold_nats: float | None = None
    rows: int = 1
    rows_flagged: int | None = None
    rows_total: int | None = None
    baseline_rows: int | None = None
    pvalue: float | None = None
    total: int | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HardFailure:
        """The record of ``to_dict`` / ``result.json``."""
        return cls(**{**d, "kind": FailureKind(d["kind"]), "prefix": tuple(d.get("prefix", ()))})
