"""A kernel that calls the models itself (re-drafts after a rejection), checked through the model layout."""

import torch

from speceq.kernels import Outcome, kernel, sample_tokens


def redraft_step(target, draft, prompts, k, generator, stale_draft_law=False):
    """Your step: draft k tokens, verify them one by one; after a rejection, re-draft the rest from the new prefix."""
    b = prompts.shape[0]
    drafts, q_path, prefix = [], [], prompts
    for _ in range(k):  # the block drafted along the draft model's own path
        q = draft(prefix)
        q_path.append(q)
        drafts.append(sample_tokens(q, generator))
        prefix = torch.cat([prefix, drafts[-1][:, None]], dim=1)
    out, on_path = prompts, torch.ones(b, dtype=torch.bool)
    for t in range(k + 1):  # every position is one draft-and-verify step: k + 1 tokens in all
        q_new = draft(out)  # off the draft path once a request has rejected
        fresh = sample_tokens(q_new, generator)
        use_path = on_path & (t < k)
        d = torch.where(use_path, drafts[min(t, k - 1)], fresh)
        q = torch.where(use_path[:, None], q_path[min(t, k - 1)], q_new)
        if stale_draft_law:  # the bug: the re-drafted token judged by the law of the original path
            q = q_path[min(t, k - 1)]
        p = target(out)
        rows = torch.arange(b)
        accept = torch.rand(b, generator=generator) * q[rows, d] < p[rows, d]
        token = torch.where(accept, d, sample_tokens((p - q).clamp(min=0), generator))  # residual after a rejection
        on_path &= accept
        out = torch.cat([out, token[:, None]], dim=1)
    return out[:, prompts.shape[1]:]


@kernel(layout="model", method="lossless")
def my_kernel(req):
    return Outcome(tokens=redraft_step(req.target, req.draft, req.prompts, req.k, req.generator))


@kernel(layout="model", method="lossless")
def my_buggy_kernel(req):
    return Outcome(tokens=redraft_step(req.target, req.draft, req.prompts, req.k, req.generator, stale_draft_law=True))
