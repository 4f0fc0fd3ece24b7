"""A block-resampling step (the shape of hierarchical speculative decoding), written for the model layout.

The step verifies the k drafted tokens as one block and, after a rejection, replaces the whole
block with one drawn from the block residual, token by token (hierarchically), calling both
models at prefixes off the draft path:

1. draft d = (d_0 .. d_{k-1}) from the draft model along its own path;
2. the joint laws P and Q of every block of k tokens after the prompt (the models queried at
   every prefix of depth < k: 1 + V + ... + V^(k-1) prefixes per request);
3. accept the whole block with probability min(1, P(d) / Q(d));
4. otherwise draw a block from the residual R = (P - Q)+: x_0 from R's first-token marginal,
   then each x_j from R's marginal given x_0 .. x_{j-1};
5. one more token from the target after the emitted block.

The k-token block is then the maximal coupling of Q and P: its law is min(P, Q) + (P - Q)+ = P,
so the k + 1 emitted tokens follow the target's sequence law (lossless as a block). The token
drawn at the rejection alone is not target-distributed, and neither are the accepted drafts
given acceptance: only the whole block is. Two variants that look plausible and are not:

- ``truncated``: what a chain-contract wrapper can return, the accepted drafts plus the first
  resampled token (on rejection, x_0 only): lossy by construction;
- ``capped``: the hierarchy capped at depth 1, x_0 from R's marginal and the rest of the block
  from the target: cheaper, and lossy.

The enumeration costs V^k per request: a test kernel for the small vocabularies of the check,
not a production kernel.
"""

from __future__ import annotations

import torch

from speceq.kernels.contract import Kernel, KernelSpec, ModelRequest, Outcome
from speceq.kernels.table_models import sample_tokens

#: The step's variants: the lossless step, and the two lossy ones of the module docstring.
VARIANTS = ("exact", "truncated", "capped")


def joint_laws(request: ModelRequest) -> tuple[torch.Tensor, torch.Tensor]:
    """The target and draft laws of every block of k tokens: two float64 ``[batch, V^k]``.

    Block (x_0 .. x_{k-1}) sits at index sum_j x_j V^(k-1-j). One call of each model per depth.
    """
    B, V, k = request.batch_size, request.vocab_size, request.k
    dev = request.prompts.device
    P = torch.ones(B, 1, dtype=torch.float64, device=dev)
    Q = torch.ones_like(P)
    prefixes = request.prompts
    for j in range(k):
        p = request.target(prefixes).to(torch.float64).reshape(B, V**j, V)
        q = request.draft(prefixes).to(torch.float64).reshape(B, V**j, V)
        P = (P[:, :, None] * p).reshape(B, V ** (j + 1))
        Q = (Q[:, :, None] * q).reshape(B, V ** (j + 1))
        if j < k - 1:
            tokens = torch.arange(V, device=dev).repeat(prefixes.shape[0])[:, None]
            prefixes = torch.cat([prefixes.repeat_interleave(V, dim=0), tokens], dim=1)
    return P, Q


def block_resampling_step(request: ModelRequest, variant: str = "exact") -> torch.Tensor:
    """One step (module docstring); returns ``[batch, k + 1]`` tokens, -1 padded (truncated variant)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    g = request.generator
    B, V, k = request.batch_size, request.vocab_size, request.k
    dev = request.prompts.device
    rows = torch.arange(B, device=dev)
    # 1. the drafts, drawn here from the draft model
    drafts = torch.empty(B, k, dtype=torch.int64, device=dev)
    prefix = request.prompts
    for j in range(k):
        drafts[:, j] = sample_tokens(request.draft(prefix), g)
        prefix = torch.cat([prefix, drafts[:, j: j + 1]], dim=1)
    # 2.-3. block acceptance
    P, Q = joint_laws(request)
    flat = (drafts * (V ** torch.arange(k - 1, -1, -1, device=dev))).sum(dim=1)
    pd, qd = P[rows, flat], Q[rows, flat]
    u = torch.rand(B, generator=g, dtype=torch.float64, device=dev)
    accept = u * qd < pd
    # 4. a block from the residual, token by token
    residual = (P - Q).clamp_min(0.0)
    empty = residual.sum(dim=1) <= 0  # P == Q: never rejected; any block will do (it is not used)
    residual[empty] = 1.0
    block = torch.empty(B, k, dtype=torch.int64, device=dev)
    at = torch.zeros(B, dtype=torch.int64, device=dev)
    depth = 1 if variant == "capped" else k
    for j in range(depth):
        marginal = residual.reshape(B, V**j, V, V ** (k - j - 1))[rows, at].sum(dim=-1)
        block[:, j] = sample_tokens(marginal, g)
        at = at * V + block[:, j]
    if depth < k:  # capped: the rest of the block from the target, after the resampled token
        prefix = torch.cat([request.prompts, block[:, :depth]], dim=1)
        for j in range(depth, k):
            block[:, j] = sample_tokens(request.target(prefix), g)
            prefix = torch.cat([prefix, block[:, j: j + 1]], dim=1)
    chosen = torch.where(accept[:, None], drafts, block)
    # 5. the token after the block
    bonus = sample_tokens(request.target(torch.cat([request.prompts, chosen], dim=1)), g)
    out = torch.cat([chosen, bonus[:, None]], dim=1)
    if variant == "truncated":
        out[~accept, 1:] = -1
    return out


def block_resampling_kernel(variant: str = "exact", k: int = 3) -> Kernel:
    """The step as a model-layout kernel (declared lossless: the ``truncated`` and ``capped`` variants are not)."""
    spec = KernelSpec(layout="model", method="lossless", max_draft=k, name=f"model:block-resampling-{variant}")
    return Kernel(lambda r: Outcome(tokens=block_resampling_step(r, variant)), spec)
