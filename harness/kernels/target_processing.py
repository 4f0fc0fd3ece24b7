"""The processed target law of one row, in float64, as an engine computes it (vLLM's conventions).

logits / temperature, then min-p (drop the tokens whose tempered probability is below min_p
times the largest: :func:`speceq.core.processing.min_p_cut`, the one implementation), then top-k
(keep the logits >= the k-th largest), softmax, then top-p (keep the most likely tokens until
their mass reaches top_p: a token is kept when the mass strictly before it in descending order
is < top_p), renormalised: the ``vllm`` order of :mod:`speceq.core.processing`. Temperature 0
is greedy: a point mass at the argmax. The scenarios keep every cut unambiguous
(:func:`cut_margins`), so a float32 kernel and this float64 computation keep the same tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from speceq.core.processing import min_p_cut


@dataclass(frozen=True, slots=True)
class RequestParams:
    """Per-request sampling parameters: temperature (0 = greedy), top_k (0 = off), top_p (1 = off), min_p (0 = off)."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def identity(self) -> bool:
        return self.temperature == 1.0 and self.top_k == 0 and self.top_p >= 1.0 and self.min_p <= 0.0

    def label(self) -> str:
        if self.greedy:
            return "greedy"
        parts = [f"T={self.temperature:g}"]
        if self.top_k:
            parts.append(f"top_k={self.top_k}")
        if self.top_p < 1.0:
            parts.append(f"top_p={self.top_p:.4g}")
        if self.min_p > 0.0:
            parts.append(f"min_p={self.min_p:.4g}")
        return ", ".join(parts)


def softmax64(x: np.ndarray) -> np.ndarray:
    """Softmax of a 1-D float64 array; -inf entries get probability 0."""
    m = np.max(x)
    e = np.exp(x - m)
    return e / e.sum()


def _tempered(logits: np.ndarray, params: RequestParams) -> np.ndarray:
    """float32 logits / float32 temperature, widened to float64 (as the engine divides, then exactly)."""
    x = np.asarray(logits, dtype=np.float32)
    return (x / np.float32(params.temperature)).astype(np.float64)


def _scaled(logits: np.ndarray, params: RequestParams) -> np.ndarray:
    """Tempered logits after min-p and top-k (-inf where cut), float64."""
    x = _tempered(logits, params)
    if params.min_p > 0.0:
        x = min_p_cut(torch.from_numpy(x), params.min_p).numpy()
    if params.top_k and params.top_k < x.size:
        kth = np.partition(x, x.size - params.top_k)[x.size - params.top_k]
        x = np.where(x < kth, -np.inf, x)
    return x


def processed_law(logits: np.ndarray, params: RequestParams) -> np.ndarray:
    """The law a correct engine samples from for one row of float32 logits (float64 ``[V]``)."""
    x = np.asarray(logits, dtype=np.float32)
    if params.greedy:
        out = np.zeros(x.size)
        out[int(np.argmax(x))] = 1.0
        return out
    p = softmax64(_scaled(x, params))
    if params.top_p < 1.0:
        order = np.argsort(-p, kind="stable")
        before = np.cumsum(p[order]) - p[order]
        keep = np.zeros(p.size, dtype=bool)
        keep[order[before < params.top_p]] = True
        p = np.where(keep, p, 0.0)
        p = p / p.sum()
    return p


def cut_margins(logits: np.ndarray, params: RequestParams) -> dict[str, float]:
    """How far each cut is from being ambiguous (larger is safer).

    ``top_k``: gap between the k-th and (k+1)-th largest scaled logits; ``top_p``: distance of
    top_p from the nearest cumulative mass in descending order (0 when equal probabilities
    straddle the cut: libraries keep different tied tokens); ``min_p``: distance (nats) of
    log(min_p) from the nearest tempered log-probability ratio to the most likely token;
    ``argmax``: gap between the two largest raw logits (greedy rows).
    """
    x = np.asarray(logits, dtype=np.float32)
    out: dict[str, float] = {}
    if params.greedy:
        top2 = np.sort(x.astype(np.float64))[-2:]
        out["argmax"] = float(top2[1] - top2[0])
        return out
    if params.top_k and params.top_k < x.size:
        s = np.sort((x / np.float32(params.temperature)).astype(np.float64))[::-1]
        out["top_k"] = float(s[params.top_k - 1] - s[params.top_k])
    if params.top_p < 1.0:
        p = softmax64(_scaled(x, params))
        desc = np.sort(p)[::-1]
        cum = np.cumsum(desc)
        out["top_p"] = float(np.min(np.abs(cum - params.top_p)))
        kept = int(np.sum(cum - desc < params.top_p))
        if kept < desc.size and desc[kept - 1] == desc[kept]:
            out["top_p"] = 0.0  # a tie across the cut: which tied tokens stay is an implementation's tie order
    if params.min_p > 0.0:
        t = _tempered(x, params)
        out["min_p"] = float(np.min(np.abs((t - np.max(t)) - np.log(params.min_p))))
    return out


def min_p_midpoint(logits: np.ndarray, params: RequestParams, target: float) -> float:
    """A min_p near ``target`` halfway (in log space) between two tempered probability ratios (an unambiguous cut).

    The ratios r_j = p_j / max p after temperature, in descending order; returns
    exp((log r_{m-1} + log r_m) / 2) for the interval (r_m, r_{m-1}] holding ``target``.
    """
    t = _tempered(np.asarray(logits, dtype=np.float32), params)
    ratios = np.sort(t - np.max(t))[::-1]  # log ratios, 0 first
    m = int(np.searchsorted(-ratios, -np.log(target)))
    m = min(max(m, 1), ratios.size - 1)
    return float(np.exp((ratios[m - 1] + ratios[m]) / 2.0))


def nucleus_midpoint(logits: np.ndarray, params: RequestParams, target: float) -> float:
    """A top_p near ``target`` that sits halfway between two cumulative masses (an unambiguous cut).

    Returns the midpoint of the interval (S_{m-1}, S_m] holding ``target``, where S_j is the
    mass of the j most likely tokens after temperature, min-p and top-k.
    """
    p = softmax64(_scaled(np.asarray(logits, dtype=np.float32), replace(params, top_p=1.0)))
    cum = np.cumsum(np.sort(p)[::-1])
    m = int(np.searchsorted(cum, target))
    m = min(max(m, 1), cum.size - 1)
    low = cum[m - 1]
    high = cum[m]
    return float((low + high) / 2.0)
