"""How far outside the processed support a token is, in nats of logit error (pure numpy).

A token of oracle probability 0 is proof of a bug only if no engine whose logits are close to
the oracle's could emit it: a correct bf16 engine emits nucleus-boundary tokens the float32
oracle excludes. The rule used here: an engine's raw logits l' are within ``delta`` of the
oracle's l when, for some constant c, |l'_i - l_i - c| <= delta/2 for every token i of oracle
log-probability log softmax(l)_i >= -C (so no log-odds between two such tokens moves by more
than delta), and l'_j - c <= logsumexp(l) - C + delta/2 for every other token j (the tail may
take any value up to the cut plus the margin: its low-precision error is far larger). C is
:data:`TAIL_NATS`; tail_nats = inf gives the plain spread rule. The tail rule is computed by
raising the tail's logits to the cut and applying the plain rule: the most favourable
perturbation for a token only ever raises the tail. The processing is the engines' (temperature T, then top-k,
then top-p; :mod:`speceq.core.processing`) at the case's declared settings.

:func:`exclusion_margins` returns, per token x, the exclusion margin Delta*(x): the supremum
of the deltas at which *every* such l' still excludes x. x is robustly outside the support at
delta exactly when Delta*(x) > delta; Delta*(x) = 0 when some l' arbitrarily close to l admits
x (tokens in the support, ties at the top-k edge); +inf when x's logit is -inf (EOS under
``ignore_eos``), which no finite error admits. Delta* is exact over perturbations that leave no
exact tie at the top-k cut. The processing keeps every token tied with the k-th logit (as vLLM
and transformers do), so an l' that ties two tokens there keeps more than k; with top-p on as
well, that larger normaliser can admit x at a delta below Delta* (tested): for such l', Delta*
is an upper bound.

Derivation (scaled logits z = l / T, each moved by at most d / 2 with d = delta / T). The
perturbation most favourable to x raises x by d/2, lowers every token that stays above x by
d/2 and raises every other token by d/2 but never past x: a token j with z_j > z_x + d is
above x whatever the perturbation (the forced set, f of them, mass A); any other token can be
put at or below x, where it only adds to the normaliser. Under top-k, x is excluded iff f >= k.
Under top-p, the smallest attainable mass strictly before x is

    m(d) = A / (A + e^d (e^{z_x} + B)),  A = sum_{forced} e^{z_j},  B = sum of the next
    k - 1 - f tokens of e^{min(z_j, z_x)} (all remaining ones without top-k),

and x is excluded iff m(d) >= top_p. Both conditions only weaken as d grows, so Delta* is one
number, computed exactly per interval of constant f (no search).
"""

from __future__ import annotations

import numpy as np

from speceq.stats.scores import TokenScores

#: The tail cut C (nats): tokens whose oracle log-probability (raw logits, T = 1) is below -C may
#: take any logit up to that level plus the margin (low-precision error grows with a logit's
#: distance from the top: up to several nats at log-probability -60 on the bundled BPE model in
#: bf16, docs/measurements/numerics.md), while the others move by at most the margin.
TAIL_NATS = 10.0
#: Rows of a ``[rows, vocab]`` block processed at once (memory: a few float64 copies of it).
_BLOCK_ENTRIES = 2**22


def exclusion_margins(logits: np.ndarray, tokens: np.ndarray, *, temperature: float, top_k: int = 0,
                      top_p: float = 1.0, tail_nats: float = TAIL_NATS) -> np.ndarray:
    """Delta*(x) in raw-logit nats for each row's token (``logits`` ``[n, V]`` raw, ``tokens`` ``[n]``).

    temperature > 0 (greedy has no support to speak of); top_k <= 0 or >= V: off; top_p >= 1:
    off. Without truncation every finite-logit token is admitted (Delta* = 0). Masked tokens
    (logit -inf) of the row other than x are ignored, as processing gives them probability 0.
    """
    lg = np.asarray(logits, dtype=np.float64)
    x = np.asarray(tokens, dtype=np.int64)
    if lg.ndim != 2 or x.shape != (lg.shape[0],):
        raise ValueError(f"`logits` must be [n, V] and `tokens` [n], got {lg.shape} and {x.shape}")
    n, vocab = lg.shape
    if n and (x.min() < 0 or x.max() >= vocab):
        raise ValueError(f"`tokens` must be ids in [0, {vocab}), got {int(x.min())}..{int(x.max())}")
    if not (isinstance(temperature, (int, float)) and np.isfinite(temperature) and temperature > 0):
        raise ValueError(f"`temperature` must be a finite number > 0, got {temperature!r}")
    if not 0 < float(top_p) <= 1:
        raise ValueError(f"`top_p` must lie in (0, 1], got {top_p!r}")
    if not (isinstance(tail_nats, (int, float)) and tail_nats > 0):
        raise ValueError(f"`tail_nats` must be a number > 0 (inf: no tail rule), got {tail_nats!r}")
    if np.isfinite(tail_nats) and n:
        finite = np.isfinite(lg)
        with np.errstate(under="ignore"):
            top = np.where(finite, lg, -np.inf).max(axis=1, keepdims=True)
            lse = top + np.log(np.where(finite, np.exp(lg - top), 0.0).sum(axis=1, keepdims=True))
        lg = np.where(finite, np.maximum(lg, lse - float(tail_nats)), lg)  # the tail, at its highest level
    out = np.zeros(n, dtype=np.float64)
    step = max(1, _BLOCK_ENTRIES // max(1, vocab))
    for lo in range(0, n, step):
        out[lo:lo + step] = _block(lg[lo:lo + step] / float(temperature), x[lo:lo + step], int(top_k),
                                   float(top_p)) * float(temperature)
    return out


def _block(z: np.ndarray, x: np.ndarray, top_k: int, top_p: float) -> np.ndarray:
    """Delta* / T for one block of scaled logits ``z`` [m, V] (see the module docstring)."""
    m, vocab = z.shape
    k = top_k if 0 < top_k < vocab else vocab
    idx = np.arange(m)
    zx = z[idx, x]
    result = np.zeros(m, dtype=np.float64)
    dead = ~np.isfinite(zx)  # -inf: no finite error admits it
    result[dead] = np.inf
    live = ~dead
    if not live.any() or (k >= vocab and top_p >= 1.0):
        return result
    z, zx, x = z[live], zx[live], x[live]
    mm = z.shape[0]
    others = z.copy()
    others[np.arange(mm), x] = -np.inf
    s = -np.sort(-others, axis=1)[:, : vocab - 1]  # the other tokens, descending  [mm, V-1]
    gaps = s - zx[:, None]  # b_i: token i of s is forced above x while d < b_i
    best = np.zeros(mm, dtype=np.float64)
    if k <= vocab - 1:  # top-k: f >= k while d < b_{k-1}
        best = np.maximum(best, gaps[:, k - 1])
    if top_p < 1.0:
        shift = np.maximum(s[:, 0], zx)  # the row's largest logit: exponentials <= 1
        with np.errstate(under="ignore"):
            e_s = np.exp(s - shift[:, None])
            e_capped = np.exp(np.minimum(s, zx[:, None]) - shift[:, None])
            e_x = np.exp(zx - shift)
        p1 = np.concatenate([np.zeros((mm, 1)), np.cumsum(e_s, axis=1)], axis=1)  # P1[f] = sum_{i<f}
        p2 = np.concatenate([np.zeros((mm, 1)), np.cumsum(e_capped, axis=1)], axis=1)
        kk = min(k - 1, vocab - 1)
        f = np.arange(1, min(k, vocab))  # f forced tokens, 1 <= f <= k-1 (f = 0: mass 0 < top_p)
        a = p1[:, f]  # [mm, F]
        rest = e_x[:, None] + p2[:, kk][:, None] - p2[:, f]
        with np.errstate(divide="ignore"):
            # m(d) >= top_p  <=>  e^d <= A (1 - top_p) / (top_p * rest)
            d_star = np.log(a * (1.0 - top_p)) - np.log(top_p * rest)
        upper_end = gaps[:, f - 1]  # exactly f tokens are forced for d in [b_f, b_{f-1})
        lower_end = gaps[:, np.minimum(f, vocab - 2)] if vocab > 2 else np.full_like(upper_end, -np.inf)
        lower_end = np.where(f < vocab - 1, lower_end, -np.inf)
        ok = np.isfinite(upper_end) & (upper_end > lower_end) & (d_star >= lower_end)
        cand = np.where(ok, np.minimum(upper_end, d_star), -np.inf)  # the largest excluded d of the interval
        best = np.maximum(best, cand.max(axis=1, initial=-np.inf))
    result[live] = np.maximum(best, 0.0)
    return result


def outside_margin(scores: TokenScores, margin_nats: float) -> np.ndarray | None:
    """Per token: is it outside the processed support by more than ``margin_nats``? (None: not computable).

    margin_nats > 0: Delta*(x) > margin_nats (no law within the margin emits it). 0: the
    exact-oracle rule, oracle probability 0. inf: Delta*(x) = inf, a token no finite logit
    error admits (its logit is -inf: EOS under ``ignore_eos``), the only tokens outside the
    support under numerics of unknown size. None when the oracle gives no exclusion margins
    (a server's top-K log-probabilities cannot bound what lies outside them).
    """
    if isinstance(margin_nats, bool) or not isinstance(margin_nats, (int, float)) or not 0 <= margin_nats <= np.inf:
        raise ValueError(f"`margin_nats` must be a number of nats >= 0 (inf allowed), got {margin_nats!r}")
    if scores.exclusion_margin is None:
        return None
    if margin_nats == 0:
        return np.asarray(scores.prob) <= 0
    if margin_nats == np.inf:
        return np.asarray(scores.exclusion_margin) == np.inf
    return np.asarray(scores.exclusion_margin) > margin_nats


def boundary_tokens(scores: TokenScores, margin_nats: float) -> np.ndarray:
    """Per token: oracle probability 0, yet inside the support of some law within ``margin_nats``.

    These are the tokens a processing cut (top-k, top-p) excludes under the oracle's numerics but
    that an engine whose logits are within the margin may emit: boundary evidence of a numerics
    difference, not of a bug. Empty (all False) at margin 0, and when the oracle gives no exclusion
    margins (then nothing bounds the support, and every probability-0 token stays one).
    """
    outside = outside_margin(scores, margin_nats)
    if outside is None:
        return np.zeros(len(scores), dtype=bool)
    return (np.asarray(scores.prob) <= 0) & ~outside


__all__ = ["TAIL_NATS", "boundary_tokens", "exclusion_margins", "outside_margin"]
