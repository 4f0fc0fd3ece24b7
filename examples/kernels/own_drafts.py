"""A package's step that samples its own drafts from causal LMs, checked through the model layout."""

import torch

from speceq.kernels import Outcome, kernel


# --- the package, unchanged: it takes causal LMs (input_ids [N, T] -> logits [N, T, V]) and drafts itself ---
def speculative_step(target_lm, draft_lm, input_ids, k, generator, bonus_from_draft=False):
    """Draft k tokens with draft_lm, verify them with one target_lm call; returns tokens [N, k + 1], -1 padded."""
    n, start = input_ids.shape[0], input_ids.shape[1]
    ids, q = input_ids, []
    for _ in range(k):
        q.append(draft_lm(ids)[:, -1].softmax(dim=-1))
        ids = torch.cat([ids, torch.multinomial(q[-1], 1, generator=generator)], dim=1)
    q = torch.stack(q, dim=1)  # [N, k, V]
    p = target_lm(ids)[:, start - 1:].softmax(dim=-1)  # [N, k + 1, V]
    d = ids[:, start:]
    ratio = p[:, :k].gather(2, d[..., None]).squeeze(2) / q.gather(2, d[..., None]).squeeze(2)
    accepted = torch.cumprod((torch.rand(n, k, generator=generator) < ratio).long(), dim=1).sum(dim=1)
    rows = torch.arange(n)
    last = p[rows, accepted]  # the bonus row when every draft was accepted
    rejected = accepted < k
    q_at = q[rows, accepted.clamp(max=k - 1)]
    residual = torch.where(rejected[:, None], (last - q_at).clamp(min=0), q_at if bonus_from_draft else last)
    token = torch.multinomial(residual, 1, generator=generator).squeeze(1)
    out = torch.full((n, k + 1), -1, dtype=torch.long)
    out[:, :k] = torch.where(torch.arange(k) < accepted[:, None], d, -1)  # the accepted drafts
    out[rows, accepted] = token
    return out


# --- the wrapper: speceq's exact models play the package's LMs, the package draws the drafts ---
@kernel(layout="model", method="lossless")
def package_step(req):
    tokens = speculative_step(req.target.causal_logits, req.draft.causal_logits, req.prompts, req.k, req.generator)
    return Outcome(tokens=tokens)


@kernel(layout="model", method="lossless")
def package_buggy_step(req):  # the bonus token drawn from the draft law instead of the target's
    tokens = speculative_step(req.target.causal_logits, req.draft.causal_logits, req.prompts, req.k, req.generator,
                              bonus_from_draft=True)
    return Outcome(tokens=tokens)
