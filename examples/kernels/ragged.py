"""A verification kernel in vLLM's ragged layout, wrapped for speceq's kernel check (docs/how-to/test-a-kernel.md)."""

import torch

from speceq.kernels import Outcome, kernel


def rejection_sample(draft_token_ids, num_draft_tokens, draft_probs, target_logits, target_logits_indices,
                     bonus_logits_indices, generator, bonus_rows_last=False):
    """Your kernel: flat draft ids [T], drafts per request, draft probs [T, V], target logits [T + B, V].

    Returns the tokens [B, k + 1]: each request's accepted drafts, one recovered or bonus token, then -1.
    """
    b, k, t = len(num_draft_tokens), max(num_draft_tokens, default=0), draft_token_ids.shape[0]
    counts = torch.tensor(num_draft_tokens, device=draft_token_ids.device)
    req = torch.repeat_interleave(torch.arange(b, device=counts.device), counts)  # the request of each draft
    pos = torch.arange(t, device=counts.device) - (counts.cumsum(0) - counts)[req]  # its position in the request
    if bonus_rows_last:  # the bug: every draft row first, then the bonus rows (vLLM interleaves them)
        target_logits_indices, bonus_logits_indices = torch.arange(t), torch.arange(t, t + b)
    p = target_logits[target_logits_indices].softmax(dim=-1)  # [T, V]
    ids = draft_token_ids[:, None]
    u = torch.rand(t, generator=generator, device=p.device)
    accept = u * draft_probs.gather(1, ids)[:, 0] < p.gather(1, ids)[:, 0]  # accept d while u < p(d) / q(d)
    n = counts.clone().scatter_reduce(0, req[~accept], pos[~accept], reduce="amin")  # drafts before the first rejection
    law = target_logits[bonus_logits_indices].softmax(dim=-1)  # the bonus law when every draft was accepted
    rejected = (n < counts).nonzero()[:, 0]
    at = (counts.cumsum(0) - counts + n)[rejected]  # flat index of each rejected draft
    residual = torch.clamp(p[at] - draft_probs[at], min=0.0)
    law[rejected] = torch.where(residual.sum(1, keepdim=True) > 0, residual, p[at])
    out = torch.full((b, k + 1), -1, dtype=torch.long, device=p.device)
    kept = pos < n[req]
    out[req[kept], pos[kept]] = draft_token_ids[kept]
    out[torch.arange(b, device=p.device), n] = torch.multinomial(law, 1, generator=generator)[:, 0]
    return out


@kernel(layout="ragged", method="standard")
def my_kernel(req):
    return Outcome(tokens=rejection_sample(req.draft_token_ids, req.num_draft_tokens, req.draft_probs,
                                           req.target_logits, req.target_logits_indices, req.bonus_logits_indices,
                                           req.generator))


@kernel(layout="ragged", method="standard")
def my_buggy_kernel(req):  # reads the target rows as if the bonus rows came after every draft row
    return Outcome(tokens=rejection_sample(req.draft_token_ids, req.num_draft_tokens, req.draft_probs,
                                           req.target_logits, req.target_logits_indices, req.bonus_logits_indices,
                                           req.generator, bonus_rows_last=True))
