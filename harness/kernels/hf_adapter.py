"""transformers' speculative-sampling step, or any function of its signature, as a single-request kernel.

``transformers.generation.utils._speculative_sampling(candidate_input_ids, candidate_logits,
candidate_length, new_logits, assistant_ensemble_weight=None)`` (transformers 5.24 and 5.25; a
private function of that library, the verification step of assisted generation) takes one
request: the candidate ids (prompt then k drafts), the draft logits ``[1, k, V]`` and the target
logits ``[1, k + 1, V]``, softmaxes both, accepts when ``r <= p/q`` (5.24; ``r < p/q`` from 5.25)
with ``r = torch.rand_like``, draws the recovered token from ``clamp(p - q, 0)`` normalised or
the bonus from p, and returns
``(valid_tokens [1, n + 1], n_matches)``. speceq hands it the log of the probabilities it
builds (-inf at exact zeros) and seeds torch's global generator of the request's device from
the request before each call (the function draws from it; see :func:`seed_global_generator`).
``assistant_ensemble_weight`` in (0, 1) is DIVERSE's ensemble verification (arXiv
2604.07622): lossy by design, so the kernel is declared lossy.

``fn=``: any function with that signature (your own step, a fork, a patched copy) is driven
the same way, without importing transformers: ``fn(candidate_input_ids [1, 1 + k] (a one-token
prompt, then the k drafts),
candidate_logits [1, k, V], candidate_length k, new_logits [1, k + 1, V]) -> (tokens [1, n + 1],
n_matches)``, with ``assistant_ensemble_weight=`` passed only when one is given. Its random
draws must come from torch's global generator (``torch.rand_like``, ``torch.multinomial`` without
a generator), which speceq seeds before each call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from speceq.errors import ConfigError
from speceq.kernels.contract import Kernel, KernelSpec, Outcome, SingleRequest

FUNCTION = "_speculative_sampling"


def seed_global_generator(device: torch.device, seed: int) -> None:
    """Seed the global generator torch's draws on ``device`` use, as ``torch.manual_seed`` seeds it.

    On the CPU this is ``torch.default_generator.manual_seed``: ``torch.manual_seed`` seeds
    every device's generator too, and while CUDA is not initialised it queues that seeding with
    a formatted stack trace (0.4-1.8 ms a call on the 2-core CPU machine, more than the
    function it precedes). Other devices: ``torch.manual_seed`` (initialised there, so cheap).
    """
    if device.type == "cpu":
        torch.default_generator.manual_seed(seed)
    else:
        torch.manual_seed(seed)


def transformers_speculative_sampling(*, fn: Callable[..., Any] | None = None,
                                      assistant_ensemble_weight: float | None = None, max_draft: int = 3,
                                      inject_uniforms: bool = False, name: str = "") -> Kernel:
    """transformers' ``_speculative_sampling``, or ``fn`` with its signature, as a speceq kernel (single, standard).

    fn: a function with transformers' signature (module docstring); None: transformers' own
    (imported here). inject_uniforms: during each call, ``torch.rand_like`` (the function's
    acceptance draw) returns speceq's uniforms for the request, so the boundary scenarios (u = 0,
    u -> 1) reach it; the recovered / bonus draw stays ``torch.multinomial``'s. The patch is
    process-global while a call runs (do not run other torch code in parallel threads with this
    option).
    """
    own = fn is None
    if fn is None:
        from transformers.generation import utils

        fn = getattr(utils, FUNCTION)
    elif not callable(fn):
        raise ConfigError(f"expected a function with transformers' {FUNCTION} signature, got {type(fn).__name__}",
                          where="transformers_speculative_sampling(fn=...)")
    step = fn
    extra = {} if assistant_ensemble_weight is None else {"assistant_ensemble_weight": assistant_ensemble_weight}

    def run(req: SingleRequest) -> Outcome:
        k = req.num_draft_tokens
        dev = req.target_probs.device
        candidates = torch.cat([torch.zeros(1, dtype=torch.int64, device=dev), req.draft_token_ids.to(torch.int64)])
        seed_global_generator(dev, req.seed)
        original = torch.rand_like
        if inject_uniforms:
            def rand_like(x: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
                return req.uniforms.to(dtype=x.dtype, device=x.device).reshape(x.shape)

            torch.rand_like = rand_like  # type: ignore[assignment]
        try:
            valid, n_matches = step(candidates[None], req.draft_logits[None], k, req.target_logits[None], **extra)
        finally:
            torch.rand_like = original  # type: ignore[assignment]
        return Outcome(tokens=valid[0], emitted_draft_counts=torch.as_tensor([int(n_matches)]))

    lossy = assistant_ensemble_weight is not None and assistant_ensemble_weight < 1.0
    base = "transformers _speculative_sampling" if own else getattr(fn, "__qualname__", type(fn).__name__)
    label = name or (base + (f" (ensemble weight {assistant_ensemble_weight:g})"
                             if assistant_ensemble_weight is not None else "")
                     + (" (uniforms injected)" if inject_uniforms else ""))
    return Kernel(run, KernelSpec(layout="single", method="standard", lossy=lossy, uniforms=inject_uniforms,
                                  max_draft=max_draft, name=label))
