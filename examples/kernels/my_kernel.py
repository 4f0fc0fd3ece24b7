"""A verification kernel in FlashInfer's layout, wrapped for speceq's kernel check (docs/how-to/test-a-kernel.md)."""

import torch

from speceq.kernels import Outcome, kernel


def chain_speculative_sampling(draft_probs, draft_token_ids, target_probs, generator, resample_from_target=False):
    """Your kernel: draft probs [B, k, V], draft ids [B, k], target probs [B, k + 1, V] -> tokens [B, k + 1]."""
    b, k, _ = draft_probs.shape
    ids = draft_token_ids.long()
    p = target_probs[:, :k].gather(2, ids[..., None]).squeeze(2)
    q = draft_probs.gather(2, ids[..., None]).squeeze(2)
    u = torch.rand(b, k, generator=generator, device=ids.device)
    n = torch.cumprod((u * q < p).long(), dim=1).sum(dim=1)  # accept d while u < p(d) / q(d)
    rows = torch.arange(b, device=ids.device)
    last_p = target_probs[rows, n]  # the target law where the chain stops
    last_q = torch.cat([draft_probs, torch.zeros_like(draft_probs[:, :1])], dim=1)[rows, n]
    residual = last_p if resample_from_target else torch.clamp(last_p - last_q, min=0.0)
    residual = torch.where(residual.sum(1, keepdim=True) > 0, residual, last_p)
    token = torch.multinomial(residual, 1, generator=generator).squeeze(1)
    out = torch.where(torch.arange(k, device=ids.device) < n[:, None], ids, -1)
    out = torch.cat([out, torch.full_like(out[:, :1], -1)], dim=1)
    out[rows, n] = token
    return out, n


@kernel(layout="padded", method="standard")
def my_kernel(req):
    out, n = chain_speculative_sampling(req.draft_probs, req.draft_token_ids, req.target_probs, req.generator)
    return Outcome(tokens=out, emitted_draft_counts=n)


@kernel(layout="padded", method="standard")
def my_buggy_kernel(req):  # the classic bug: after a rejection, resample from p instead of max(0, p - q)
    out, n = chain_speculative_sampling(req.draft_probs, req.draft_token_ids, req.target_probs, req.generator,
                                        resample_from_target=True)
    return Outcome(tokens=out, emitted_draft_counts=n)
