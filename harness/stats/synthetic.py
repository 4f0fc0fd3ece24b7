"""Exact synthetic sampler and scorer: A/A calibration level 1 and power checks of the tests.

Draws random next-token distributions, samples tokens from them (or from a deliberately
shifted law) and computes the :class:`TokenScores` an oracle would produce, so the oracle
tests can be checked against their own p without any model. Pure numpy; memory is
O(tokens x vocab) float64, so build large sets in chunks.
"""

from __future__ import annotations

import numpy as np

from speceq.stats._validate import check_int, check_positive, check_rng
from speceq.stats.scores import TokenScores


def _random_target_probs_iv(rng: object, n: object, vocab: object, top_k: object) -> tuple[np.random.Generator, int, int, int]:
    rng = check_rng(rng)
    n = check_int(n, "n", minimum=1)
    vocab = check_int(vocab, "vocab", minimum=2)
    top_k = check_int(top_k, "top_k", minimum=0)
    if top_k > vocab:
        raise ValueError(f"`top_k` ({top_k}) exceeds `vocab` ({vocab})")
    return rng, n, vocab, top_k


def random_target_probs(rng: np.random.Generator, n: int, vocab: int, *, top_k: int = 0) -> np.ndarray:
    """``[n, vocab]`` distributions: softmax of N(0, s^2) logits with s ~ U(0.5, 3) per row.

    ``top_k > 0`` keeps the k most probable tokens (ties by id) and renormalises, so the
    support check has zeros to find.
    """
    rng, n, vocab, top_k = _random_target_probs_iv(rng, n, vocab, top_k)
    logits = rng.standard_normal((n, vocab)) * rng.uniform(0.5, 3.0, size=(n, 1))
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    if top_k:
        order = np.argsort(-probs, axis=1, kind="stable")
        np.put_along_axis(probs, order[:, top_k:], 0.0, axis=1)
    return probs / probs.sum(axis=1, keepdims=True)


def _sample_categorical_iv(probs: object, rng: object) -> tuple[np.ndarray, np.random.Generator]:
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 2 or p.shape[1] < 1:
        raise ValueError(f"`probs` must be 2-D [n, vocab], got shape {p.shape}")
    return p, check_rng(rng)


def sample_categorical(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One token per row of ``probs`` by inversion of the CDF (int64 ``[n]``)."""
    p, rng = _sample_categorical_iv(probs, rng)
    cdf = np.cumsum(p, axis=1)
    u = rng.random(p.shape[0]) * cdf[:, -1]
    tokens = (cdf <= u[:, None]).sum(axis=1)
    return np.minimum(tokens, p.shape[1] - 1).astype(np.int64)


def _tempered_iv(probs: object, temperature: object) -> tuple[np.ndarray, float]:
    t = check_positive(temperature, "temperature", upper=1e6)
    p, _ = _sample_categorical_iv(probs, np.random.default_rng(0))
    return p, t


def tempered(probs: np.ndarray, temperature: float) -> np.ndarray:
    """Rows of ``probs`` raised to 1/temperature and renormalised (same support)."""
    p, t = _tempered_iv(probs, temperature)
    with np.errstate(divide="ignore"):
        logp = np.where(p > 0, np.log(np.where(p > 0, p, 1.0)) / t, -np.inf)
    out = np.exp(logp - logp.max(axis=1, keepdims=True))
    return out / out.sum(axis=1, keepdims=True)


def _scores_from_probs_iv(
    probs: object, tokens: object, draft_probs: object
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 2:
        raise ValueError(f"`probs` must be 2-D [n, vocab], got shape {p.shape}")
    x = np.asarray(tokens)
    if x.shape != (p.shape[0],) or not np.issubdtype(x.dtype, np.integer):
        raise ValueError(f"`tokens` must be an integer array of shape ({p.shape[0]},), got {x.dtype} {x.shape}")
    if x.size and (x.min() < 0 or x.max() >= p.shape[1]):
        raise ValueError(f"`tokens` must lie in [0, {p.shape[1]})")
    q = None
    if draft_probs is not None:
        q = np.asarray(draft_probs, dtype=np.float64)
        if q.shape != p.shape:
            raise ValueError(f"`draft_probs` must have shape {p.shape}, got {q.shape}")
    return p, x.astype(np.int64), q


def scores_from_probs(probs: np.ndarray, tokens: np.ndarray, *, draft_probs: np.ndarray | None = None) -> TokenScores:
    """The TokenScores of ``tokens`` under target ``probs`` ``[n, vocab]`` (one row per token).

    Follows the TokenScores contract: vocabulary ranked by descending p, ties by ascending id;
    log-moments over the support; draft fields when ``draft_probs`` is given (floored at 1e-30).
    Rows are independent contexts: ``row`` = 0..n-1 and ``position`` = 0.
    """
    p, x, q = _scores_from_probs_iv(probs, tokens, draft_probs)
    n, vocab = p.shape
    idx = np.arange(n)
    px = p[idx, x]
    ids = np.arange(vocab)[None, :]
    before = (p > px[:, None]) | ((p == px[:, None]) & (ids < x[:, None]))
    cdf_before = (p * before).sum(axis=1)
    top = np.argmax(p, axis=1)
    with np.errstate(divide="ignore"):
        logp_all = np.where(p > 0, np.log(np.where(p > 0, p, 1.0)), 0.0)
        logp = np.log(px)
    logp_mean = (p * logp_all).sum(axis=1)
    logp_var = np.maximum((p * logp_all**2).sum(axis=1) - logp_mean**2, 0.0)
    top2 = np.sort(p, axis=1)[:, -2:]
    with np.errstate(divide="ignore"):
        margin = np.log(top2[:, 1]) - np.log(top2[:, 0])
    draft = {}
    if q is not None:
        llr_all = np.log(np.maximum(q, 1e-30)) - logp_all
        mean = (p * llr_all).sum(axis=1)
        draft = dict(
            draft_llr=np.log(np.maximum(q[idx, x], 1e-30)) - logp,
            draft_llr_mean=mean,
            draft_llr_var=np.maximum((p * llr_all**2).sum(axis=1) - mean**2, 0.0),
            draft_tv=np.clip(0.5 * np.abs(p - q).sum(axis=1), 0.0, 1.0),
        )
    return TokenScores(
        row=idx.astype(np.int64), position=np.zeros(n, dtype=np.int64), token=x, prob=px, cdf_before=cdf_before,
        argmax_prob=p[idx, top], is_argmax=(x == top), logp=logp, logp_mean=logp_mean, logp_var=logp_var,
        raw_top2_margin=margin, **draft,
    )
