"""Exact laws of a correct verification kernel, for each declared method (float64, numpy).

Notation: at draft position i the processed target law is p_i and the draft law is q_i (the
draft token d_i was drawn from q_i by speceq, so this holds by construction); p_k is the bonus
row. For every lossless method, given that position i is reached, the token emitted there is
distributed as p_i: iterated verification samples the target's sequence law exactly if and
only if this holds for every prefix (a one-call output reaches position m with prefix s with
some probability R_m(s), and the stream law forces P(prefix s, token x at m) = R_m(s) p_m(x)).
That is the main test. The methods differ in their accepted-length law L (the number of
accepted drafts; L + 1 tokens are emitted):

- ``standard`` (Leviathan et al. 2211.17192): accept d_i with probability min(1, p_i/q_i);
  beta_i = sum_x min(p_i, q_i); P(L >= j) = prod_{i<j} beta_i. Accepted token law
  min(p, q) / beta, recovered law (p - q)+ / (1 - beta).
- ``one-hot`` (no draft law given) and ``exact-match`` (draw x ~ p_i, accept iff x == d_i):
  P(accept | d) = p_i(d), so beta_i = sum_x q_i(x) p_i(x); accepted law q p / beta; recovered
  law p (1 - q) / (1 - beta).
- ``block`` (Sun et al. 2403.10444): weights w_0 = 1, w_j = min(1, w_{j-1} p_{j-1}(d)/q_{j-1}(d));
  residual masses r_j = sum_x (w_j p_j - q_j)+; h_j = r_j / (r_j + 1 - w_j) for j < k, h_k = w_k;
  L = the largest j with u_j <= h_j (0 if none); correction from (w_L p_L - q_L)+ normalised,
  or p_k when L = k. Its length law is an expectation over drafts, computed by enumeration.
"""

from __future__ import annotations

import itertools

import numpy as np

#: Below this rejection (or residual) mass a position's recovered law is not tested: a
#: rejection is then a float32 rounding event whose law the float64 computation cannot know.
MIN_RESIDUAL_MASS = 1e-3
#: Most draft sequences enumerated for the block method's length law.
MAX_BLOCK_ENUMERATION = 200_000
#: Below this TV(p_i, q_i) at some position the block length law is not computed: with p ~ q,
#: w = min(1, w p(d)/q(d)) is 1 - (rounding) and r = sum (w p - q)+ is rounding too, so
#: h = r / (r + 1 - w) is a ratio of rounding errors that a float32 kernel and this float64
#: computation cannot agree on (the token laws are unaffected).
BLOCK_MIN_TV = 1e-3


def acceptance(p: np.ndarray, q: np.ndarray, method: str) -> float:
    """Probability that a draft drawn from q is accepted at one position (beta)."""
    if method == "standard":
        return float(np.minimum(p, q).sum())
    if method in ("one-hot", "exact-match"):
        return float((p * q).sum())
    raise ValueError(f"no one-position acceptance law for method {method!r}")


def accepted_law(p: np.ndarray, q: np.ndarray, method: str) -> np.ndarray | None:
    """Law of the emitted token given that the draft was accepted (None when beta is 0)."""
    w = np.minimum(p, q) if method == "standard" else p * q
    mass = w.sum()
    return None if mass <= 0 else w / mass


def recovered_law(p: np.ndarray, q: np.ndarray, method: str) -> np.ndarray | None:
    """Law of the emitted token given that the draft was rejected (None when rejection is ~impossible)."""
    w = np.clip(p - q, 0.0, None) if method == "standard" else p * (1.0 - q)
    mass = w.sum()
    return None if mass < MIN_RESIDUAL_MASS else w / mass


def tokenwise_length_law(betas: np.ndarray) -> np.ndarray:
    """P(L = j), j = 0..k, for independent per-position acceptance probabilities beta_0..beta_{k-1}."""
    b = np.asarray(betas, dtype=np.float64)
    reach = np.concatenate([[1.0], np.cumprod(b)])  # P(L >= j)
    law = reach.copy()
    law[:-1] -= reach[1:]
    return np.clip(law, 0.0, None) / max(law.sum(), 1e-300)


def block_weights(pd: np.ndarray, qd: np.ndarray) -> np.ndarray:
    """Block weights w_0..w_k for drafts with target probabilities pd and draft probabilities qd.

    ``pd``/``qd``: ``[..., k]`` p_i(d_i), q_i(d_i). Returns ``[..., k + 1]``.
    """
    ratio = pd / qd
    w = np.ones((*pd.shape[:-1], pd.shape[-1] + 1))
    for j in range(1, pd.shape[-1] + 1):
        w[..., j] = np.minimum(1.0, w[..., j - 1] * ratio[..., j - 1])
    return w


def residual_mass(w: np.ndarray, p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """r(w) = sum_x max(w p(x) - q(x), 0) for an array of weights w (O(V log V + |w| log V)).

    The tokens with w p(x) > q(x) are those with q(x)/p(x) < w, so with the ratios sorted
    r(w) = w P(ratio < w) - Q(ratio < w) from cumulative sums.
    """
    pos = p > 0
    ratio = q[pos] / p[pos]
    order = np.argsort(ratio, kind="stable")
    t = ratio[order]
    cp = np.concatenate([[0.0], np.cumsum(p[pos][order])])
    cq = np.concatenate([[0.0], np.cumsum(q[pos][order])])
    idx = np.searchsorted(t, w, side="left")
    return np.clip(w * cp[idx] - cq[idx], 0.0, None)


def block_stop_probabilities(w: np.ndarray, P: np.ndarray, Q: np.ndarray) -> np.ndarray:
    """h_1..h_k of block verification for weights ``w`` ``[..., k + 1]`` (index 0 unused in the result).

    ``P``: ``[k + 1, V]`` target laws, ``Q``: ``[k, V]`` draft laws. Returns ``[..., k + 1]`` with
    h_0 = 1 (stopping with no token accepted is always possible).
    """
    k = Q.shape[0]
    h = np.ones_like(w)
    for j in range(1, k):
        wj = w[..., j]
        r = residual_mass(wj, P[j], Q[j])
        denom = r + 1.0 - wj
        h[..., j] = np.where(denom > 0, r / np.where(denom > 0, denom, 1.0), 1.0)
    if k:
        h[..., k] = w[..., k]
    return h


def block_length_law(P: np.ndarray, Q: np.ndarray) -> np.ndarray | None:
    """P(L = j), j = 0..k, for block verification, by enumerating draft sequences (None if too many).

    The drafts range over the supports of the q_i; the law is sum_d prod q_i(d_i) P(L = j | d)
    with P(L >= j | d) = 1 - prod_{i >= j} (1 - h_i(d)) for j >= 1.
    """
    k = Q.shape[0]
    if k == 0:
        return np.ones(1)
    if min(0.5 * np.abs(P[i] - Q[i]).sum() for i in range(k)) < BLOCK_MIN_TV:
        return None  # p ~ q: h = r / (r + 1 - w) is 0/0 up to rounding, its law is not computable
    supports = [np.flatnonzero(Q[i] > 0) for i in range(k)]
    if np.prod([s.size for s in supports], dtype=np.float64) > MAX_BLOCK_ENUMERATION:
        return None
    grids = np.meshgrid(*supports, indexing="ij")
    d = np.stack([g.ravel() for g in grids], axis=-1)  # [combos, k]
    cols = np.arange(k)
    pd = P[cols, d]
    qd = Q[cols, d]
    weight = qd.prod(axis=-1)
    w = block_weights(pd, qd)
    h = block_stop_probabilities(w, P, Q)
    survive = np.cumprod((1.0 - h[:, ::-1])[:, :-1], axis=-1)[:, ::-1]  # prod_{i >= j} (1 - h_i), j = 1..k
    at_least = np.concatenate([np.ones((d.shape[0], 1)), 1.0 - survive], axis=-1)  # P(L >= j | d), j = 0..k
    law_d = at_least.copy()
    law_d[:, :-1] -= at_least[:, 1:]
    law = (weight[:, None] * law_d).sum(axis=0)
    return np.clip(law, 0.0, None) / law.sum()


def block_one_call_law(P: np.ndarray, Q: np.ndarray) -> dict[tuple[int, ...], float]:
    """Exact law of one block-verification call's emitted sequence (small V and k only; for tests).

    Returns {emitted token tuple: probability}. Used to check the reached-position property
    P(prefix s, token x at m) = R_m(s) p_m(x) on which the whole check rests.
    """
    k, V = Q.shape
    out: dict[tuple[int, ...], float] = {}
    for d in itertools.product(range(V), repeat=k):
        qd = np.array([Q[i, d[i]] for i in range(k)])
        prob_d = float(qd.prod())
        if prob_d == 0:
            continue
        pd = np.array([P[i, d[i]] for i in range(k)])
        w = block_weights(pd[None], qd[None])[0]
        h = block_stop_probabilities(w[None], P, Q)[0]
        for tau in range(k + 1):
            # P(L = tau | d): eta_tau = 1 (tau >= 1) and eta_i = 0 for i > tau
            p_tau = (h[tau] if tau >= 1 else 1.0) * float(np.prod(1.0 - h[tau + 1:]))
            if p_tau == 0:
                continue
            if tau == k:
                corr = P[k]
            else:
                res = np.clip(w[tau] * P[tau] - Q[tau], 0.0, None)
                corr = res / res.sum() if res.sum() > 0 else P[tau]
            for y in np.flatnonzero(corr > 0):
                seq = (*d[:tau], int(y))
                out[seq] = out.get(seq, 0.0) + prob_d * p_tau * float(corr[y])
    return out
