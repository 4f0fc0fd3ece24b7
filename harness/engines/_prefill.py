"""Forwards remembered across rows: the ``hf-*`` engines' one-row-at-a-time loops skip work an earlier row did.

Transformers' speculative paths run one row per ``generate()`` call, so every row of a case
prefills the same prompt again (the target's forward over the whole prompt, and for assisted
generation the assistant's too), and rows that drew the same tokens make the same decoding
steps: on a 54-token SmolLM2 chat prompt with a one-word answer the prefill is most of a row's
time. :func:`remember_prefills` wraps a model's ``forward`` so that a forward it has seen before,
with the same inputs after the same history of its ``DynamicCache``, returns the remembered
logits and appends the remembered keys and values to the cache instead of computing them again.

The history is the chain of forwards whose positions the cache still holds. A rollback (a crop:
transformers drops rejected drafts) forgets the forwards wholly above the new length, since the
positions kept were written before those ran and hold the same bits whatever they were; a forward
cut through its middle stays in the chain, with its cut. So two rows that drafted different tokens
and kept the same ones share the steps after the rollback. A cache written or reshaped where the
memo did not see it (a forward it passed through, a batch reordered) is unknown from then on.

Nothing changes but the time: the remembered tensors are the ones the same forward computed on
the same inputs and the same cache contents (a CPU or GPU forward is deterministic for fixed
inputs, shapes and thread count), copied, so every later step sees the same cache and logits bit
for bit, and the random draws of ``generate()`` are untouched (a forward draws none).
``tests/engines/test_hf_prefill.py`` checks that the rows are identical with and without it.

The key is every keyword of the forward (input ids, attention mask, positions, ...) plus the
model's config and the identity of its weight tensors, so a draft forward through fewer layers
(early exit) or a pruned head is never answered with another forward's result.
Only the plain case is remembered: a ``DynamicCache`` of plain ``DynamicLayer`` layers, no hidden
states or attentions asked for, every keyword a tensor, a number, a string or None. Anything else
passes through untouched. At most :data:`MAX_BYTES` of tensors are kept per model (least recently
used first out).

``SPECEQ_HF_PREFILL_MEMO=0`` turns it off (``benchmarks/bench_hf_rows.py`` times both).
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections import OrderedDict
from typing import Any

#: Tensors kept per model (keys, values, logits of remembered prefills), in bytes.
MAX_BYTES = 256 * 2**20
#: Environment switch: ``0`` turns the memo off (for timing the engines without it).
ENV_SWITCH = "SPECEQ_HF_PREFILL_MEMO"
_CACHE_KEYWORDS = ("cache", "past_key_values")
_PASS_THROUGH_FLAGS = ("output_hidden_states", "output_attentions")
#: Attribute of a DynamicCache: (its forwards as a stack of (key, the cache's length after it), its storage);
#: None: unknown.
_HISTORY_ATTR = "_speceq_history"


def memo_enabled() -> bool:
    """False when ``SPECEQ_HF_PREFILL_MEMO`` is ``0`` (read at each engine's construction)."""
    return os.environ.get(ENV_SWITCH, "1").strip() != "0"


def _key_part(value: Any) -> Any:
    """A hashable, exact stand-in for a keyword value; raises TypeError for a value not handled."""
    import torch

    if value is None or isinstance(value, (bool, int, float, str)):
        return (type(value).__name__, value)
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        return ("tensor", str(t.dtype), tuple(t.shape), t.numpy().tobytes())
    raise TypeError(type(value).__name__)


def _weight_addresses(model: Any) -> tuple[int, ...]:
    """The data address of every weight tensor under ``model`` (a module holding a tied weight lists it again).

    The same identities as ``p.data_ptr() for p in model.parameters()``, read from the module
    dictionaries in a plain loop: ``parameters()`` also builds every parameter's dotted name and a set
    of seen tensors, about 1.1 ms per forward on SmolLM2 (397 modules, 272 tensors), where this walk
    takes about 0.3 ms; the memo asks at every forward.
    """
    addresses: list[int] = []
    add = addresses.append
    stack = [model]
    while stack:
        module = stack.pop()
        if module is None:  # a submodule slot registered empty
            continue
        for weight in module._parameters.values():
            if weight is not None:
                add(weight.data_ptr())
        children = module._modules
        if children:
            stack.extend(children.values())
    return tuple(addresses)


def _model_state(model: Any) -> tuple[str, tuple[int, ...]]:
    """What else a forward depends on: the model's config (transformers' early exit lowers
    ``num_hidden_layers`` for the draft's forward) and which weight tensors it holds (an assistant
    whose head transformers prunes in place gets new ones)."""
    config = getattr(model, "config", None)
    return repr(sorted(vars(config).items(), key=lambda kv: kv[0])) if config is not None else "", _weight_addresses(
        model)


def _storage(cache: Any) -> tuple[int, int, tuple[int, ...]]:
    """Where the first layer's keys and values live, and their shape but length: a crop keeps both (a view);
    anything else that rewrites the cache (a batch reordered, repeated) changes them."""
    layer = cache.layers[0]
    return layer.keys.data_ptr(), layer.values.data_ptr(), tuple(layer.keys.shape[:-2])


def _forget_caches(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Mark every cache among a forward's arguments as holding an unknown history (the memo won't answer it)."""
    for value in (*args, *kwargs.values()):
        if hasattr(value, "get_seq_length") and hasattr(value, "layers"):
            try:
                setattr(value, _HISTORY_ATTR, None)
            except AttributeError:  # a cache type that takes no new attributes is never answered anyway
                pass


class PrefillMemo:
    """The remembered forwards of one model (see the module docstring); ``hits`` / ``misses`` count them.

    Each ``DynamicCache`` a forward writes into carries its history (the chain of forwards whose
    positions it still holds, see :meth:`_history`); a forward is answered from memory when the same
    keywords follow the same history, by appending the remembered new keys and values.
    """

    def __init__(self, model: Any, max_bytes: int = MAX_BYTES) -> None:
        self.model = model
        self.max_bytes = max_bytes
        self._entries: OrderedDict[bytes, tuple[type, dict[str, Any], list[tuple[Any, Any]], int]] = OrderedDict()
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    def _usable_cache(self, kwargs: dict[str, Any]) -> tuple[str, Any] | None:
        from transformers.cache_utils import DynamicCache, DynamicLayer

        names = [k for k in _CACHE_KEYWORDS if kwargs.get(k) is not None]
        if len(names) != 1:
            return None
        cache = kwargs[names[0]]
        if type(cache) is not DynamicCache or getattr(cache, "offloading", False):
            return None
        if any(type(layer) is not DynamicLayer for layer in cache.layers):
            return None
        if any(kwargs.get(flag) for flag in _PASS_THROUGH_FLAGS) or kwargs.get("inputs_embeds") is not None:
            return None
        return names[0], cache

    @staticmethod
    def _history(cache: Any) -> bytes | None:
        """The digest of what ``cache`` holds now; None: unknown (written or reshaped where the memo did not see).

        The cache carries the stack of its forwards' keys with its length after each, and the storage its
        tensors had after the last one (a crop keeps it: the tensors become views). A crop keeps the
        forwards wholly below the new length (why that is exact: the module docstring), names a forward
        cut through the middle with its cut, and sets the cache's stack to the one kept.
        """
        length = cache.get_seq_length()
        if length == 0:
            setattr(cache, _HISTORY_ATTR, ((), None))
            return b"empty"
        known = getattr(cache, _HISTORY_ATTR, None)
        if known is None or not known[0] or known[1] != _storage(cache) or length > known[0][-1][1]:
            return None
        stack = kept = known[0]
        while kept and kept[-1][1] > length:
            cut, kept = kept[-1], kept[:-1]
        if kept is not stack and (not kept or kept[-1][1] < length):
            # the last forward dropped wrote positions on both sides of the crop: its kept part, by name
            kept = (*kept, (hashlib.sha256(cut[0] + f"cut {length}".encode()).digest(), length))
        setattr(cache, _HISTORY_ATTR, (kept, known[1]))
        return kept[-1][0]

    @staticmethod
    def _record(cache: Any, key: bytes) -> None:
        """Push the forward just run (``key``) onto the cache's stack with the cache's length after it."""
        known = getattr(cache, _HISTORY_ATTR, None)
        stack = known[0] if known is not None else ()
        setattr(cache, _HISTORY_ATTR, ((*stack, (key, cache.get_seq_length())), _storage(cache)))

    def call(self, forward: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``forward(*args, **kwargs)``, or its remembered result when this forward followed this history before."""
        found = None if args else self._usable_cache(kwargs)
        if found is None:
            _forget_caches(args, kwargs)  # a cache this forward writes holds what the memo did not see
            return forward(*args, **kwargs)
        name, cache = found
        history = self._history(cache)
        if history is None:
            setattr(cache, _HISTORY_ATTR, None)
            return forward(*args, **kwargs)
        try:
            parts = (_model_state(self.model), tuple(sorted((k, _key_part(v)) for k, v in kwargs.items() if k != name)))
        except TypeError:
            setattr(cache, _HISTORY_ATTR, None)
            return forward(*args, **kwargs)
        key = hashlib.sha256(history + repr(parts).encode()).digest()
        before = [layer.get_seq_length() for layer in cache.layers]
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            self.hits += 1
            out_type, fields, layers, _ = entry
            for index, (k, v) in enumerate(layers):
                cache.update(k.clone(), v.clone(), index)
            self._record(cache, key)
            return out_type(**{f: v.clone() for f, v in fields.items()}, **{name: cache})
        self.misses += 1
        out = forward(*args, **kwargs)
        self._record(cache, key)
        self._remember(key, out, name, cache, before)
        return out

    def _remember(self, key: bytes, out: Any, name: str, cache: Any, before: list[int]) -> None:
        import torch

        layers = cache.layers
        if len(layers) < len(before) or any(layer.get_seq_length() < n for layer, n in zip(layers, before)):
            return
        try:
            fields = {f: v for f, v in out.items() if f != name}
        except AttributeError:
            return
        if any(v is not None and not isinstance(v, torch.Tensor) for v in fields.values()) or out.get(name) is not cache:
            return
        starts = [*before, *[0] * (len(layers) - len(before))]
        saved_fields = {f: v.detach().clone() for f, v in fields.items() if v is not None}
        saved_layers = [(layer.keys[..., n:, :].detach().clone(), layer.values[..., n:, :].detach().clone())
                        for layer, n in zip(layers, starts)]
        size = sum(t.numel() * t.element_size() for t in saved_fields.values())
        size += sum(t.numel() * t.element_size() for kv in saved_layers for t in kv)
        if size > self.max_bytes:
            return
        self._entries[key] = (type(out), saved_fields, saved_layers, size)
        self._bytes += size
        while self._bytes > self.max_bytes:
            _, (_, _, _, dropped) = self._entries.popitem(last=False)
            self._bytes -= dropped


def remember_prefills(model: Any) -> PrefillMemo | None:
    """Wrap ``model.forward`` (on this instance) with a :class:`PrefillMemo`; None when switched off or
    already wrapped. The wrapper keeps the forward's signature (transformers inspects it)."""
    if not memo_enabled() or getattr(model, "_speceq_prefill_memo", None) is not None:
        return None
    memo = PrefillMemo(model)
    original = model.forward

    @functools.wraps(original)
    def forward(*args: Any, **kwargs: Any) -> Any:
        return memo.call(original, args, kwargs)

    model.forward = forward
    model._speceq_prefill_memo = memo
    return memo
