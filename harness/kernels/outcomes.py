"""Reading a chain kernel's output: emitted lengths, and the invariants every correct kernel keeps.

A row of ``tokens`` must be: L accepted drafts (equal to the drafts handed in), one more token
(recovered or bonus), then -1 to the end, with 0 <= L <= the request's draft count and every id
in [0, V). Every emitted token must have positive probability under the processed target law
at its position (a token of probability 0 is impossible for a lossless kernel). A greedy row
must be the target's argmax path. A kernel's own counter of accepted drafts must equal L.
Violations are hard failures, counted per (template, kind) with one example each.

A row is *unreadable* when its length cannot be read (id-range, no-token, padding, or the call's
shape): its length is -1 and it is left out of every statistical test. A row that breaks only
the other invariants (draft-mismatch, zero-probability, greedy, counter) is still read: its
length and tokens are what the kernel emitted, and every test uses them. Dropping such rows
would condition the tests on the kernel's output (a bug in the recovered or bonus draw that
emits zero-probability tokens would drop rows by their length, biasing the accepted-length law
and the earlier positions' token laws), so a bug in one law would be reported in another.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from speceq.kernels.scenarios import Template

#: Invariant kinds, in the order they are reported.
KINDS = {
    "raised": "the kernel raised an exception on a valid request",
    "shape": "the output has the wrong shape",
    "id-range": "an emitted id is outside [0, vocab) (and is not the -1 padding)",
    "no-token": "a request emitted no token",
    "padding": "a token after the first -1, or more tokens than the request's drafts + 1",
    "draft-mismatch": "an accepted token differs from the draft at its position",
    "zero-probability": "an emitted token has probability 0 under the processed target law",
    "greedy": "a greedy row is not the target's argmax path",
    "counter": "the kernel's accepted-draft counter differs from the emitted tokens",
    "tree-path": "the accepted nodes are not a root path of the tree",
}


@dataclass(frozen=True, slots=True)
class Violation:
    """One invariant broken ``count`` times on template ``template`` (``example``: the first case)."""

    kind: str
    template: str
    count: int
    example: str

    def summary(self) -> str:
        return f"{self.template}: {KINDS[self.kind]} ({self.count} request(s); e.g. {self.example})"


@dataclass(frozen=True, slots=True)
class ParsedCall:
    """Per request of one call: emitted lengths L (-1 when the row is unreadable) and the emitted tokens."""

    lengths: np.ndarray  # int64 [B]
    tokens: np.ndarray  # int64 [B, k_max + 1], -1 after the emitted ones (and on unusable rows)
    violations: tuple[Violation, ...]


def as_token_array(tokens: object, batch: int, where: str) -> np.ndarray:
    """Kernel output -> int64 numpy ``[batch, width]`` (torch tensors are moved to the CPU)."""
    arr = tokens
    if hasattr(arr, "detach"):
        arr = arr.detach().to("cpu").numpy()  # type: ignore[union-attr]
    arr = np.asarray(arr)
    if arr.ndim == 1 and batch == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[0] != batch or arr.dtype.kind not in "iu":  # signed or unsigned integers
        raise ValueError(f"{where}: expected integer tokens of shape [{batch}, width], got {arr.dtype} {arr.shape}")
    return arr.astype(np.int64)


def parse_call(tokens: np.ndarray, slots: np.ndarray, templates: tuple[Template, ...], drafts: np.ndarray,
               counters: np.ndarray | None = None) -> ParsedCall:
    """Check one call's ``tokens`` ``[B, W]`` against the requests that produced it.

    slots: template index per request; drafts: ``[B, k_max]`` the drafts handed in (-1 after a
    request's own); counters: the kernel's accepted-draft counts, if it returns them.
    """
    n = np.array([t.n_draft for t in templates], dtype=np.int64)[slots]
    k_max = drafts.shape[1]
    need = int(n.max()) + 1 if n.size else 1
    if need <= tokens.shape[1] < k_max + 1:  # a kernel may size its output to this call's longest request
        tokens = np.pad(tokens, ((0, 0), (0, k_max + 1 - tokens.shape[1])), constant_values=-1)
    b, width = tokens.shape
    vocab = templates[0].vocab_size
    found: dict[tuple[str, str], list] = {}

    def flag(kind: str, rows: np.ndarray, describe) -> None:
        for r in np.flatnonzero(rows):
            key = (kind, templates[slots[r]].name)
            if key in found:
                found[key][0] += 1
            else:
                found[key] = [1, describe(int(r))]

    def row_text(r: int) -> str:
        return f"request {r}: tokens {tokens[r, : min(width, k_max + 2)].tolist()}, drafts {drafts[r, : n[r]].tolist()}"

    if width < k_max + 1:
        flag("shape", np.ones(b, dtype=bool), lambda r: f"width {width} < the call's most drafts + 1 = {need}")
        return ParsedCall(np.full(b, -1, np.int64), np.full((b, k_max + 1), -1, np.int64), _collect(found))
    neg = tokens == -1
    bad_id = ~neg & ((tokens < 0) | (tokens >= vocab))
    first_neg = np.where(neg.any(axis=1), neg.argmax(axis=1), width)
    emitted = first_neg
    cols = np.arange(width)[None, :]
    after = cols >= emitted[:, None]
    padding = (after & ~neg).any(axis=1) | (emitted > n + 1)
    ids = (bad_id & ~after).any(axis=1)
    none = emitted == 0
    flag("id-range", ids, row_text)
    flag("no-token", none & ~ids, row_text)
    flag("padding", padding & ~ids & ~none, row_text)
    usable = ~(ids | none | padding)
    lengths = np.where(usable, emitted - 1, -1)

    kept = np.full((b, k_max + 1), -1, dtype=np.int64)
    kept_w = min(width, k_max + 1)
    kept[:, :kept_w] = np.where(cols[:, :kept_w] < emitted[:, None], tokens[:, :kept_w], -1)
    kept[~usable] = -1
    # accepted tokens equal the drafts
    within = np.arange(k_max)[None, :] < lengths[:, None]
    mismatch = (within & (kept[:, :k_max] != drafts)).any(axis=1)
    flag("draft-mismatch", mismatch, row_text)
    # every emitted token has positive probability at its position (greedy rows: checked below)
    zero = np.zeros(b, dtype=bool)
    for t_index in np.unique(slots):
        tpl = templates[t_index]
        if tpl.greedy:
            continue
        rows = np.flatnonzero((slots == t_index) & usable & ~mismatch)
        if rows.size == 0:
            continue
        for i in range(tpl.n_draft + 1):
            at = rows[lengths[rows] >= i]
            if at.size:
                zero[at[tpl.law[i, kept[at, i]] == 0]] = True
    flag("zero-probability", zero, lambda r: row_text(r) + f", template {templates[slots[r]].name}")
    greedy_bad = _greedy_mismatch(kept, lengths, slots, templates, drafts, usable & ~mismatch)
    flag("greedy", greedy_bad, row_text)
    if counters is not None:
        c = np.asarray(counters).astype(np.int64).reshape(-1)
        if c.size != b:
            flag("counter", np.ones(b, dtype=bool), lambda r: f"{c.size} counters for {b} requests")
        else:
            flag("counter", usable & (c != lengths), lambda r: row_text(r) + f", counter {c[r]}")
    # mismatch, zero-probability, greedy and counter rows stay readable: their lengths and tokens are what the
    # kernel emitted, and dropping them would bias every test by the kernel's own output (module docstring)
    return ParsedCall(lengths, kept, _collect(found))


def _greedy_mismatch(kept: np.ndarray, lengths: np.ndarray, slots: np.ndarray, templates: tuple[Template, ...],
                     drafts: np.ndarray, usable: np.ndarray) -> np.ndarray:
    bad = np.zeros(kept.shape[0], dtype=bool)
    for t_index in np.unique(slots):
        tpl = templates[t_index]
        if not tpl.greedy:
            continue
        rows = np.flatnonzero((slots == t_index) & usable)
        if rows.size == 0:
            continue
        n = tpl.n_draft
        argmax = tpl.law.argmax(axis=1)  # [n + 1]
        d = drafts[rows, :n]
        match = d == argmax[None, :n]
        expected_len = np.where(match.all(axis=1), n, np.argmin(match, axis=1)) if n else np.zeros(rows.size, np.int64)
        expect = np.full((rows.size, kept.shape[1]), -1, dtype=np.int64)
        for j in range(n + 1):
            sel = expected_len >= j
            expect[sel, j] = np.where(expected_len[sel] == j, argmax[j], d[sel, j] if j < n else argmax[j])
        bad[rows] = (expect != kept[rows]).any(axis=1) | (lengths[rows] != expected_len)
    return bad


def _collect(found: dict[tuple[str, str], list]) -> tuple[Violation, ...]:
    order = list(KINDS)
    items = sorted(found.items(), key=lambda kv: (order.index(kv[0][0]), kv[0][1]))
    return tuple(Violation(kind, tpl, count, example) for (kind, tpl), (count, example) in items)


def merge(violations: list[Violation]) -> tuple[Violation, ...]:
    """Sum the counts of the same (kind, template) over calls, keeping the first example."""
    merged: dict[tuple[str, str], Violation] = {}
    for v in violations:
        key = (v.kind, v.template)
        old = merged.get(key)
        merged[key] = v if old is None else Violation(v.kind, v.template, old.count + v.count, old.example)
    order = list(KINDS)
    return tuple(sorted(merged.values(), key=lambda v: (order.index(v.kind), v.template)))
