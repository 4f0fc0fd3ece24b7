"""Law families for the scenarios: target logits rows and draft laws derived from the processed target.

Target families (float32 logits over V tokens):

- ``peaked``: one token holds ~0.9 of the mass, the rest is spread;
- ``flat``: nearly uniform;
- ``zipf``: p ~ 1 / rank (shuffled ids), a heavy tail;
- ``sparse``: a support of min(64, V / 8) tokens (at least 2), exact zeros (-inf logits) elsewhere;
- ``near-tie``: two tokens 1e-5 nats apart hold ~0.8 of the mass;
- ``floor``: four tokens hold the mass, every other token sits ~100 nats below (probabilities
  ~1e-44: subnormal or 0 in float32).

Draft relations (the draft law q from the processed target law p):

- ``equal``: q = p; ``sharp``: q ~ p^2; ``overlap``: q ~ p^0.7 e^(N(0, 0.5)) on p's support plus
  10 % spread over 16 other tokens; ``flat``: uniform over V; ``one-hot``: all mass on p's second
  most likely token; ``disjoint``: uniform over up to 32 tokens where p = 0 (beta = 0).
"""

from __future__ import annotations

import numpy as np

TARGET_FAMILIES = ("peaked", "flat", "zipf", "sparse", "near-tie", "floor")
DRAFT_RELATIONS = ("equal", "sharp", "overlap", "flat", "one-hot", "disjoint")


def target_logits(family: str, vocab: int, rng: np.random.Generator) -> np.ndarray:
    """One row of float32 logits of ``family`` over ``vocab`` tokens."""
    if family not in TARGET_FAMILIES:
        raise ValueError(f"unknown target family {family!r}; expected one of {TARGET_FAMILIES}")
    if vocab == 2:
        a = {"peaked": 2.2, "flat": 0.1, "zipf": 0.7, "sparse": 1.3, "near-tie": 1e-5, "floor": 1.0}[family]
        return np.array([a, 0.0], dtype=np.float32)[rng.permutation(2)]
    ids = rng.permutation(vocab)
    if family == "flat":
        x = rng.normal(0.0, 0.25, vocab)
    elif family == "peaked":
        x = rng.normal(0.0, 1.0, vocab)
        rest = np.log(np.exp(x).sum())
        x[ids[0]] = rest + np.log(9.0)
    elif family == "zipf":
        x = np.empty(vocab)
        x[ids] = -np.log(np.arange(1, vocab + 1)) + rng.normal(0.0, 0.05, vocab)
    elif family == "sparse":
        s = int(min(64, max(2, vocab // 8)))
        x = np.full(vocab, -np.inf)
        x[ids[:s]] = -np.log(np.arange(1, s + 1)) + rng.normal(0.0, 0.05, s)
    elif family == "near-tie":
        x = rng.normal(0.0, 1.0, vocab)
        rest = np.log(np.exp(x).sum())
        x[ids[0]] = rest + np.log(2.0)
        x[ids[1]] = x[ids[0]] - 1e-5
    else:  # floor
        x = rng.normal(0.0, 1.0, vocab) - 100.0
        x[ids[:4]] = rng.normal(0.0, 0.5, 4)
    return x.astype(np.float32)


def draft_law(relation: str, p: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A draft law (float64, sums to 1) of ``relation`` to the processed target law ``p``."""
    if relation not in DRAFT_RELATIONS:
        raise ValueError(f"unknown draft relation {relation!r}; expected one of {DRAFT_RELATIONS}")
    vocab = p.size
    support = p > 0
    if relation == "equal":
        q = p.copy()
    elif relation == "sharp":
        q = p**2
    elif relation == "flat":
        q = np.ones(vocab)
    elif relation == "one-hot":
        order = np.argsort(-p, kind="stable")
        q = np.zeros(vocab)
        q[order[1] if support.sum() > 1 else order[0]] = 1.0
    elif relation == "disjoint":
        zeros = np.flatnonzero(~support)
        if zeros.size == 0:
            raise ValueError("a disjoint draft needs a target law with zeros (use the sparse family)")
        q = np.zeros(vocab)
        q[rng.permutation(zeros)[:32]] = 1.0
    else:  # overlap
        q = np.where(support, p**0.7 * np.exp(rng.normal(0.0, 0.5, vocab)), 0.0)
        q = 0.9 * q / q.sum()
        extra = rng.permutation(vocab)[:16]
        q[extra] += 0.1 / extra.size
    return q / q.sum()


def as_float32_law(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(q as the float32 row handed to a kernel, the float64 law of that row: what drafts are drawn from)."""
    q32 = q.astype(np.float32)
    q64 = q32.astype(np.float64)
    return q32, q64 / q64.sum()
