"""Logit processing shared by every engine of the project and by the oracle.

One implementation, so the baseline sampler, the speculative sampler (draft and target
alike) and the oracle's teacher-forced scoring apply exactly the same transformation.

Order, on raw next-token logits ``[..., vocab]``:

1. ``ignore_eos``: the EOS logit is set to -inf.
2. ``temperature``: logits / T (T == 0 means greedy: a one-hot on the argmax, ties to the
   lowest token id).
3. ``top_k`` (> 0): keep the k largest logits (ties at the k-th value to the lowest ids).
4. ``top_p`` (< 1): sort the remaining probabilities descending (ties by token id), keep
   the shortest prefix whose mass reaches ``top_p`` (a token is kept when the mass strictly
   before it is < top_p), renormalise.

This matches transformers' ``TemperatureLogitsWarper -> TopKLogitsWarper -> TopPLogitsWarper``
order, except that transformers' top-p keeps ties differently at the boundary.
"""

from __future__ import annotations

import torch

from speceq.core.params import SamplingParams


def process_logits(
    logits: torch.Tensor,  # [..., vocab]
    params: SamplingParams,
    *,
    eos_token_id: int | None = None,
) -> torch.Tensor:  # [..., vocab], float32 probabilities summing to 1
    """Return the processed next-token probabilities for ``params``."""
    x = logits.float()
    if params.ignore_eos and eos_token_id is not None:
        x = x.clone()
        x[..., eos_token_id] = float("-inf")
    vocab = x.shape[-1]
    if params.greedy:
        idx = x.argmax(dim=-1, keepdim=True)  # first maximal index
        return torch.zeros_like(x).scatter_(-1, idx, 1.0)
    x = x / params.temperature
    if 0 < params.top_k < vocab:
        # stable descending sort: equal logits keep ascending-id order
        order = torch.sort(x, dim=-1, descending=True, stable=True).indices
        drop = order[..., params.top_k :]
        x = x.scatter(-1, drop, float("-inf"))
    probs = torch.softmax(x, dim=-1)
    if params.top_p < 1.0:
        sorted_p, order = torch.sort(probs, dim=-1, descending=True, stable=True)
        mass_before = torch.cumsum(sorted_p, dim=-1) - sorted_p
        keep_sorted = mass_before < params.top_p
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        probs = torch.where(keep, probs, torch.zeros_like(probs))
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def sample_from_probs(
    probs: torch.Tensor,  # [rows, vocab]
    generator: torch.Generator | None,
) -> torch.Tensor:  # [rows] int64
    """Draw one token per row by inverse CDF with one uniform per row.

    One uniform per row keeps the number of random draws fixed, so a seed reproduces a run
    exactly, and a row's draw does not depend on the other rows' vocabularies.
    """
    u = torch.rand(probs.shape[0], generator=generator, dtype=torch.float64, device=probs.device)
    cdf = torch.cumsum(probs.double(), dim=-1)
    cdf = cdf / cdf[:, -1:]
    tok = torch.searchsorted(cdf, u[:, None], right=True).squeeze(-1)
    # guard against u landing past the last non-zero bin by rounding
    tok = tok.clamp_(max=probs.shape[-1] - 1)
    # never return a zero-probability token (can only happen by float rounding at edges)
    zero = probs.gather(-1, tok[:, None]).squeeze(-1) <= 0
    if bool(zero.any()):
        tok = torch.where(zero, probs.argmax(dim=-1), tok)
    return tok
