"""The accept/reject arithmetic of speculative sampling (Leviathan et al., arXiv:2211.17192,
Alg. 1; Chen et al., arXiv:2302.01318), as pure tensor functions.

``target_probs`` = p and ``draft_probs`` = q are processed next-token laws; d_i is accepted
with probability min(1, p_i(d_i) / q_i(d_i)), in order, until the first rejection, where a
replacement is drawn from norm(max(0, p_i - q_i)).
"""

from __future__ import annotations

import torch


def gather_token_probs(
    probs: torch.Tensor,  # [rows, k, vocab]
    tokens: torch.Tensor,  # [rows, k] int64
) -> torch.Tensor:  # [rows, k]: probs[r, i, tokens[r, i]]
    """Probability each distribution gives its own token."""
    return probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def acceptance_ratios(
    target_token_probs: torch.Tensor,  # [rows, k]: p_i(d_i)
    draft_token_probs: torch.Tensor,  # [rows, k]: q_i(d_i) > 0 (d_i was drawn from q_i)
) -> torch.Tensor:  # [rows, k] in [0, 1]
    """min(1, p(d) / q(d)): the probability of accepting each draft token."""
    return torch.clamp(target_token_probs / draft_token_probs, max=1.0)


def accept_prefix_lengths(
    accept_probs: torch.Tensor,  # [rows, k] in [0, 1]
    uniforms: torch.Tensor,  # [rows, k] U[0, 1)
) -> torch.Tensor:  # [rows] int64 in 0..k
    """Number of leading draft tokens accepted: d_i is accepted iff u_i < accept_prob_i.

    Draws after the first rejection are ignored (each row still consumes k uniforms so the
    random stream does not depend on the outcome).
    """
    accepted = uniforms < accept_probs  # [rows, k]
    return torch.cumprod(accepted.long(), dim=1).sum(dim=1)


def residual_probs(
    target_probs: torch.Tensor,  # [rows, vocab]: p at the rejected position
    draft_probs: torch.Tensor,  # [rows, vocab]: q at the rejected position
) -> torch.Tensor:  # [rows, vocab]
    """norm(max(0, p - q)): the law of the replacement token after a rejection.

    A row whose residual has no mass (p == q up to rounding, so a rejection had probability
    ~0) falls back to p.
    """
    residual = torch.clamp(target_probs - draft_probs, min=0.0)
    mass = residual.sum(dim=-1, keepdim=True)
    return torch.where(mass > 0, residual / mass.clamp(min=torch.finfo(residual.dtype).tiny), target_probs)
