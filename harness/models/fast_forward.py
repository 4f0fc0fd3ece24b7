"""A lean forward pass for Llama-shaped causal LMs that gives bit-identical logits.

transformers' ``LlamaForCausalLM.forward`` spends most of its time on a tiny model in Python:
decorators, keyword plumbing, output dataclasses, cache objects, and building the attention
mask through ``masking_utils``. For the bundled ~1.1 M-parameter target one decode step
costs ~6 ms there, of which the arithmetic is well under 1 ms. :class:`FastLlama` runs the
SAME torch operations, in the same order, on tensors of the same shapes and strides (same
RMSNorm in float32, same rotary tables, same ``torch.cat`` KV cache, same boolean SDPA mask
or ``is_causal`` flag, same GQA handling), only without the Python layers around them. The
logits are therefore bit-identical to transformers' on the same inputs, not merely close,
which keeps every seeded sample of the engines identical (tested token for token).

What it deliberately does NOT do, and why:

- a pre-allocated (static) KV cache: attention would then run over more key slots (masked
  ones), and the CPU SDPA kernel's vectorised softmax and value reductions sum in a
  length-dependent order, so the logits would differ in the last bits;
- fused projections (one QKV matmul) and ``torch.compile``: both change the floating-point
  summation order of the kernels.

Only the exact architecture it mirrors is accepted (:func:`fast_model`): a
``transformers`` ``LlamaForCausalLM`` with SDPA attention, default RoPE, SiLU MLP, no module
hooks, in eval mode. Anything else falls back to the model's own forward. Set
``SPECEQ_FAST_FORWARD=0`` (or use :func:`fast_forward_enabled`) to force the transformers path.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

#: Environment variable: ``0`` turns the fast forward off (every model uses its own forward).
FAST_FORWARD_ENV = "SPECEQ_FAST_FORWARD"

_state = threading.local()
_built: weakref.WeakKeyDictionary[Any, FastLlama | None] = weakref.WeakKeyDictionary()


def fast_forward_is_enabled() -> bool:
    """Whether :func:`fast_model` may return a fast path (``$SPECEQ_FAST_FORWARD`` != ``0``, no override)."""
    override = getattr(_state, "enabled", None)
    if override is not None:
        return bool(override)
    return os.environ.get(FAST_FORWARD_ENV, "1").strip() not in ("0", "false", "no", "off")


@contextmanager
def fast_forward_enabled(enabled: bool) -> Iterator[None]:
    """Temporarily turn the fast forward on or off in this thread (benchmarks and tests)."""
    previous = getattr(_state, "enabled", None)
    _state.enabled = bool(enabled)
    try:
        yield
    finally:
        _state.enabled = previous


def fast_model(model: Any) -> FastLlama | None:
    """The :class:`FastLlama` of ``model``, or None when it is off or ``model`` is not supported."""
    if not fast_forward_is_enabled():
        return None
    try:
        fast = _built[model]
    except KeyError:
        fast = FastLlama.build(model)
        _built[model] = fast
    except TypeError:  # not weak-referenceable: not an nn.Module
        return None
    if fast is not None and not fast.still_matches(model):
        fast = FastLlama.build(model)  # weights were replaced (model.to(...), load_state_dict(assign=True))
        _built[model] = fast
    return fast


class FastKVCache:
    """Per-layer key/value tensors grown by ``torch.cat``, like transformers' ``DynamicCache``.

    keys[i], values[i]: ``[rows, kv_heads, length, head_dim]``. Offers the subset of the
    ``DynamicCache`` API the project's engines use (``get_seq_length``, ``crop``,
    ``batch_select_indices``), with the same tensor operations so that the attention sees
    tensors of the same values, shapes and strides.
    """

    def __init__(self, layers: int) -> None:
        self.keys: list[torch.Tensor | None] = [None] * layers
        self.values: list[torch.Tensor | None] = [None] * layers

    def get_seq_length(self, layer_idx: int = 0) -> int:
        keys = self.keys[layer_idx]
        if keys is None or keys.numel() == 0:
            return 0
        return int(keys.shape[-2])

    def update(self, key: torch.Tensor, value: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        keys, values = self.keys[layer], self.values[layer]
        if keys is None or values is None:
            keys = torch.tensor([], dtype=key.dtype, device=key.device)
            values = torch.tensor([], dtype=value.dtype, device=value.device)
        keys = torch.cat([keys, key], dim=-2)
        values = torch.cat([values, value], dim=-2)
        self.keys[layer], self.values[layer] = keys, values
        return keys, values

    def crop(self, max_length: int) -> None:
        """Negative ``max_length``: drop that many trailing slots (DynamicCache semantics)."""
        if max_length > 0:
            raise ValueError("FastKVCache.crop takes a negative number of slots to drop")
        if max_length == 0:
            return
        for i, (k, v) in enumerate(zip(self.keys, self.values, strict=True)):
            if k is not None and v is not None:
                self.keys[i] = k[..., : -abs(max_length), :]
                self.values[i] = v[..., : -abs(max_length), :]

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep only the rows ``indices`` (int64 ``[kept]``)."""
        if self.get_seq_length() == 0:
            return
        for i, (k, v) in enumerate(zip(self.keys, self.values, strict=True)):
            if k is not None and v is not None:
                self.keys[i] = k[indices, ...]
                self.values[i] = v[indices, ...]


@dataclass(frozen=True, slots=True)
class _Layer:
    ln1: torch.Tensor
    ln1_eps: float
    q: torch.Tensor
    q_bias: torch.Tensor | None
    k: torch.Tensor
    k_bias: torch.Tensor | None
    v: torch.Tensor
    v_bias: torch.Tensor | None
    o: torch.Tensor
    o_bias: torch.Tensor | None
    ln2: torch.Tensor
    ln2_eps: float
    gate: torch.Tensor
    gate_bias: torch.Tensor | None
    up: torch.Tensor
    up_bias: torch.Tensor | None
    down: torch.Tensor
    down_bias: torch.Tensor | None


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # transformers' LlamaRMSNorm, op for op
    input_dtype = x.dtype
    x = x.to(torch.float32)
    variance = x.pow(2).mean(-1, keepdim=True)
    x = x * torch.rsqrt(variance + eps)
    return weight * x.to(input_dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def _repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    batch, kv_heads, length, head_dim = x.shape
    if n_rep == 1:
        return x
    x = x[:, :, None, :, :].expand(batch, kv_heads, n_rep, length, head_dim)
    return x.reshape(batch, kv_heads * n_rep, length, head_dim)


class FastLlama:
    """Bit-identical lean forward of one ``LlamaForCausalLM`` (see the module docstring).

    Holds references to the model's own parameter tensors (no copies), so it costs no memory
    and sees in-place weight updates.
    """

    def __init__(self, model: Any) -> None:
        config = model.config
        inner = model.model
        self._first_param = model.lm_head.weight
        self.embed = inner.embed_tokens.weight
        self.norm = inner.norm.weight
        self.norm_eps = float(inner.norm.variance_epsilon)
        self.lm_head = model.lm_head.weight
        self.lm_head_bias = model.lm_head.bias
        self.inv_freq = inner.rotary_emb.inv_freq
        self.attention_scaling = inner.rotary_emb.attention_scaling
        attn0 = inner.layers[0].self_attn
        self.head_dim = int(attn0.head_dim)
        self.scaling = float(attn0.scaling)
        self.kv_groups = int(attn0.num_key_value_groups)
        self.num_layers = int(config.num_hidden_layers)
        # transformers makes a throw-away DynamicCache when called without one (config.use_cache);
        # attention then reads the cache's concatenated copies, so the fast path does the same
        self.use_cache = bool(getattr(config, "use_cache", True))
        self.layers = [
            _Layer(
                ln1=layer.input_layernorm.weight,
                ln1_eps=float(layer.input_layernorm.variance_epsilon),
                q=layer.self_attn.q_proj.weight,
                q_bias=layer.self_attn.q_proj.bias,
                k=layer.self_attn.k_proj.weight,
                k_bias=layer.self_attn.k_proj.bias,
                v=layer.self_attn.v_proj.weight,
                v_bias=layer.self_attn.v_proj.bias,
                o=layer.self_attn.o_proj.weight,
                o_bias=layer.self_attn.o_proj.bias,
                ln2=layer.post_attention_layernorm.weight,
                ln2_eps=float(layer.post_attention_layernorm.variance_epsilon),
                gate=layer.mlp.gate_proj.weight,
                gate_bias=layer.mlp.gate_proj.bias,
                up=layer.mlp.up_proj.weight,
                up_bias=layer.mlp.up_proj.bias,
                down=layer.mlp.down_proj.weight,
                down_bias=layer.mlp.down_proj.bias,
            )
            for layer in inner.layers[: self.num_layers]
        ]

    # ---- construction ---------------------------------------------------------------------
    @classmethod
    def build(cls, model: Any) -> FastLlama | None:
        """A FastLlama for ``model``, or None when its architecture is not exactly the mirrored one."""
        if not supports(model):
            return None
        return cls(model)

    def still_matches(self, model: Any) -> bool:
        """Whether ``model`` still holds the parameter tensors this fast path references."""
        return model.lm_head.weight is self._first_param and not model.training

    def new_cache(self) -> FastKVCache:
        return FastKVCache(self.num_layers)

    # ---- forward ----------------------------------------------------------------------------
    def __call__(
        self,
        input_ids: torch.Tensor,  # [rows, q] int64
        attention_mask: torch.Tensor | None = None,  # [rows, past + q] (0/1 or bool); None = all valid
        position_ids: torch.Tensor | None = None,  # [rows, q] or [1, q] int64; None = past + arange(q)
        cache: FastKVCache | None = None,
        logits_to_keep: int = 0,
    ) -> torch.Tensor:  # [rows, q or logits_to_keep, vocab] logits
        """Logits of ``input_ids``; the arguments mean what they mean for ``LlamaForCausalLM.forward``."""
        hidden = F.embedding(input_ids, self.embed)
        batch, q_length = int(hidden.shape[0]), int(hidden.shape[1])
        if cache is None and self.use_cache:
            cache = self.new_cache()
        past = cache.get_seq_length() if cache is not None else 0
        if position_ids is None:
            position_ids = (torch.arange(q_length, device=hidden.device) + past).unsqueeze(0)
        mask = _causal_mask(attention_mask, batch, q_length, past, hidden.device)

        # rotary tables (LlamaRotaryEmbedding.forward)
        freqs = position_ids[..., None].float() * self.inv_freq.to(device=hidden.device, dtype=torch.float)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = (emb.cos() * self.attention_scaling).to(dtype=hidden.dtype).unsqueeze(1)
        sin = (emb.sin() * self.attention_scaling).to(dtype=hidden.dtype).unsqueeze(1)

        hidden_shape = (batch, q_length, -1, self.head_dim)
        for index, layer in enumerate(self.layers):
            residual = hidden
            x = _rms_norm(hidden, layer.ln1, layer.ln1_eps)
            query = F.linear(x, layer.q, layer.q_bias).view(hidden_shape).transpose(1, 2)
            key = F.linear(x, layer.k, layer.k_bias).view(hidden_shape).transpose(1, 2)
            value = F.linear(x, layer.v, layer.v_bias).view(hidden_shape).transpose(1, 2)
            query, key = (query * cos) + (_rotate_half(query) * sin), (key * cos) + (_rotate_half(key) * sin)
            if cache is not None:
                key, value = cache.update(key, value, index)
            attn = self._attention(query, key, value, mask, q_length)
            attn = attn.reshape(batch, q_length, -1).contiguous()
            hidden = residual + F.linear(attn, layer.o, layer.o_bias)
            residual = hidden
            x = _rms_norm(hidden, layer.ln2, layer.ln2_eps)
            x = F.linear(F.silu(F.linear(x, layer.gate, layer.gate_bias)) * F.linear(x, layer.up, layer.up_bias),
                         layer.down, layer.down_bias)
            hidden = residual + x
        hidden = _rms_norm(hidden, self.norm, self.norm_eps)
        if logits_to_keep:
            hidden = hidden[:, -logits_to_keep:, :]
        return F.linear(hidden, self.lm_head, self.lm_head_bias)

    def _attention(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None, q_length: int
    ) -> torch.Tensor:  # [rows, q, heads, head_dim]
        # transformers.integrations.sdpa_attention.sdpa_attention_forward on CPU, op for op
        kwargs: dict[str, Any] = {}
        if self.kv_groups > 1:
            if mask is None and key.shape[-1] == value.shape[-1] <= 256:
                kwargs["enable_gqa"] = True
            elif q_length == 1:
                b, h, _, d = query.shape
                query = query.reshape(b, h // self.kv_groups, self.kv_groups, d)
                if mask is not None and mask.shape[1] != 1:
                    mask = mask.reshape(b, h // self.kv_groups, self.kv_groups, -1)
            else:
                key = _repeat_kv(key, self.kv_groups)
                value = _repeat_kv(value, self.kv_groups)
        is_causal = q_length > 1 and mask is None
        out = F.scaled_dot_product_attention(
            query, key, value, attn_mask=mask, dropout_p=0.0, scale=self.scaling, is_causal=is_causal, **kwargs
        )
        out = out.reshape(out.shape[0], -1, q_length, value.shape[-1])
        return out.transpose(1, 2).contiguous()


def _causal_mask(
    attention_mask: torch.Tensor | None, batch: int, q_length: int, past: int, device: torch.device
) -> torch.Tensor | None:
    """transformers' ``create_causal_mask`` for SDPA with a DynamicCache: None or bool ``[rows, 1, q, kv]``."""
    kv_length = past + q_length
    padding = None
    if attention_mask is not None:
        padding = attention_mask.to(device=device, dtype=torch.bool)
        if (extra := kv_length - padding.shape[-1]) > 0:
            padding = F.pad(padding, (0, extra))
        if padding.shape[-1] > kv_length:
            padding = padding[:, torch.arange(kv_length, device=device)]
    all_valid = padding is None or bool(padding.sum() == padding.numel())
    if (q_length == 1 or kv_length == q_length) and all_valid:
        return None
    if past == 0 and (padding is None or (bool(padding[:, :q_length].sum() == padding[:, :q_length].numel())
                                          and bool((~padding[:, q_length:]).sum() == padding[:, q_length:].numel()))):
        return None
    q_idx = (torch.arange(q_length, device=device) + past)[None, None, :, None]
    kv_idx = torch.arange(kv_length, device=device)[None, None, None, :]
    mask = kv_idx <= q_idx
    if padding is not None:
        b_idx = torch.arange(batch, device=device)[:, None, None, None]
        mask = mask & padding[b_idx, kv_idx]
    return mask.expand(batch, -1, q_length, kv_length)


def supports(model: Any) -> bool:
    """Whether ``model`` is exactly the architecture :class:`FastLlama` mirrors (see the module docstring)."""
    try:
        from transformers.models.llama.modeling_llama import LlamaForCausalLM
    except ImportError:  # pragma: no cover - transformers is a dependency
        return False
    if type(model) is not LlamaForCausalLM or model.training:
        return False
    config = model.config
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    if not getattr(config, "is_causal", True) or getattr(config, "hidden_act", None) != "silu":
        return False
    rope = getattr(config, "rope_parameters", None) or {}
    if rope.get("rope_type", "default") != "default":
        return False
    inner = model.model
    if len(inner.layers) < config.num_hidden_layers:
        return False
    for module in model.modules():
        if module._forward_hooks or module._forward_pre_hooks:
            return False
    return all(_forwards_are_stock(layer) for layer in inner.layers)


def _forwards_are_stock(layer: Any) -> bool:
    """No kernel-hub replacement or monkeypatch of the module forwards the fast path re-implements."""
    from transformers.activations import SiLUActivation
    from transformers.models.llama import modeling_llama as ml

    stock = (
        (layer.input_layernorm, ml.LlamaRMSNorm),
        (layer.post_attention_layernorm, ml.LlamaRMSNorm),
        (layer.self_attn, ml.LlamaAttention),
        (layer.mlp, ml.LlamaMLP),
    )
    if not all(type(m) is cls and "forward" not in vars(m) for m, cls in stock):
        return False
    act = layer.mlp.act_fn
    return (type(act) is SiLUActivation or type(act) is torch.nn.SiLU) and "forward" not in vars(act)
