"""A step with transformers' `_speculative_sampling` signature, checked by speceq (docs/how-to/test-a-kernel.md)."""

import torch

from speceq.kernels.hf_adapter import transformers_speculative_sampling


def my_speculative_sampling(candidate_input_ids, candidate_logits, candidate_length, new_logits,
                            assistant_ensemble_weight=None, resample_from_target=False):
    """Your step: ids [1, prompt + k], draft logits [1, k, V], target logits [1, k + 1, V] -> (tokens [1, n + 1], n)."""
    k = candidate_length
    drafts = candidate_input_ids[0, -k:]
    q = candidate_logits[0].softmax(dim=-1)
    p = new_logits[0].softmax(dim=-1)
    rows = torch.arange(k, device=drafts.device)
    ratio = p[rows, drafts] / q[rows, drafts]
    rejected = torch.rand_like(ratio) >= ratio  # accept d while r < p(d) / q(d)
    n = int(rejected.int().argmax()) if bool(rejected.any()) else k
    if n < k and not resample_from_target:
        law = torch.clamp(p[n] - q[n], min=0.0)  # after a rejection: the residual max(0, p - q)
        law = law if float(law.sum()) > 0 else p[n]
    else:
        law = p[n]  # the bonus row (or, with the bug, the target row after a rejection)
    token = torch.multinomial(law, 1)
    return torch.cat([drafts[:n], token])[None], n


def my_buggy_speculative_sampling(*args, **kwargs):  # the classic bug: resample from p after a rejection
    return my_speculative_sampling(*args, resample_from_target=True, **kwargs)


my_kernel = transformers_speculative_sampling(fn=my_speculative_sampling)
my_buggy_kernel = transformers_speculative_sampling(fn=my_buggy_speculative_sampling)
