"""Drafts derived from a target model without training: layer skipping and weight rounding.

A speculative draft must share the target's tokenizer and should agree with it often. For a
pretrained model with no small sibling at hand, the target itself can be made into one:

- :func:`layer_skip_model` keeps a subset of the target's decoder layers, in order, with the
  same embeddings, final norm and head: self-speculative decoding by layer skipping (Draft &
  Verify, Zhang et al. 2023, arXiv:2309.08168). The result is a plain, smaller
  ``LlamaForCausalLM`` (``num_hidden_layers`` = the kept count) that any engine can load as a
  separate checkpoint; it costs about kept/total of the target's layer arithmetic per token.
- :func:`rounded_weights_model` is the target with every weight matrix rounded to a coarser
  format (bfloat16, or symmetric int-N per output row): the same cost, a near-identical law.

Both are deterministic functions of the target's weights (no random numbers), so a prepare
step can rebuild the same draft bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from speceq.errors import ConfigError

#: Formats :func:`rounded_weights_model` knows.
ROUNDINGS = ("bfloat16", "int8", "int4")


def check_layer_list(keep: Sequence[int], total: int) -> tuple[int, ...]:
    """``keep`` as a sorted tuple of distinct layer indices in ``0..total-1``; ConfigError otherwise."""
    out = tuple(int(i) for i in keep)
    if not out:
        raise ConfigError("keep at least one layer", where="layer skip")
    if list(out) != sorted(set(out)):
        raise ConfigError(f"layer indices must be distinct and increasing, got {list(out)}", where="layer skip")
    if out[0] < 0 or out[-1] >= total:
        raise ConfigError(f"layer indices must lie in 0..{total - 1}, got {list(out)}", where="layer skip")
    return out


def layer_skip_model(model: Any, keep: Sequence[int]) -> Any:
    """A new model holding copies of ``model``'s decoder layers ``keep`` (in that order), its
    embeddings, final norm and head; ``config.num_hidden_layers = len(keep)``. The input model is
    not changed. Works for the Llama family (``model.model.layers``); eval mode, gradients off."""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None or not hasattr(model, "config"):
        raise ConfigError(f"{type(model).__name__} has no model.layers: not a Llama-style causal LM",
                          where="layer skip")
    kept = check_layer_list(keep, len(layers))
    config = model.config.__class__.from_dict(model.config.to_dict())
    config.num_hidden_layers = len(kept)
    for attr in ("layer_types", "mlp_layer_types"):  # per-layer lists of some configs follow the layers
        value = getattr(config, attr, None)
        if isinstance(value, list) and len(value) == len(layers):
            setattr(config, attr, [value[i] for i in kept])
    renamed: dict[str, torch.Tensor] = {}
    prefix = "model.layers."
    for name, tensor in model.state_dict().items():
        if name.startswith(prefix):
            index, _, rest = name[len(prefix):].partition(".")
            if int(index) not in kept:
                continue
            name = f"{prefix}{kept.index(int(index))}.{rest}"
        renamed[name] = tensor.detach().clone()
    with torch.random.fork_rng(devices=[]):
        draft = type(model)(config)  # random init, every parameter overwritten below
    result = draft.load_state_dict(renamed, strict=False)
    tied = {k for k in result.missing_keys if k.endswith("lm_head.weight")} if config.tie_word_embeddings else set()
    if set(result.missing_keys) - tied or result.unexpected_keys:
        raise ConfigError(f"layer-skipped state dict does not fit: missing {result.missing_keys}, "
                          f"unexpected {result.unexpected_keys}", where="layer skip")
    draft.tie_weights()
    draft.generation_config = model.generation_config
    draft.to(dtype=next(model.parameters()).dtype)
    draft.eval()
    draft.requires_grad_(False)
    return draft


def round_tensor(weight: torch.Tensor, fmt: str) -> torch.Tensor:
    """``weight`` rounded to ``fmt`` and back to its dtype: ``bfloat16`` (round to nearest even), or
    ``int8`` / ``int4``: symmetric per-row quantization (scale = row max |w| / (2^(b-1) - 1))."""
    if fmt == "bfloat16":
        return weight.to(torch.bfloat16).to(weight.dtype)
    if fmt not in ROUNDINGS:
        raise ConfigError(f"unknown rounding {fmt!r}; known: {', '.join(ROUNDINGS)}", where="rounded weights")
    levels = 127 if fmt == "int8" else 7
    w = weight.double()
    scale = w.abs().amax(dim=-1, keepdim=True).clamp_min(1e-30) / levels
    return (torch.round(w / scale).clamp(-levels, levels) * scale).to(weight.dtype)


def rounded_weights_model(model: Any, fmt: str) -> Any:
    """A deep copy of ``model`` with every 2-D weight (projections, embeddings, head) rounded by
    :func:`round_tensor`; norms stay exact. The input model is not changed."""
    import copy

    if fmt not in ROUNDINGS:
        raise ConfigError(f"unknown rounding {fmt!r}; known: {', '.join(ROUNDINGS)}", where="rounded weights")
    out = copy.deepcopy(model)
    with torch.no_grad():
        for param in out.parameters():
            if param.dim() == 2:
                param.copy_(round_tensor(param, fmt))
    out.eval()
    out.requires_grad_(False)
    return out
