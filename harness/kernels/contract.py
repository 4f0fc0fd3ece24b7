"""The kernel contract: what a verification kernel receives and returns, in the layouts engines use.

A verification kernel takes one batch of draft tokens with the draft and target laws and
returns the emitted tokens. speceq builds every input (the laws, the draft tokens drawn from
the draft law it hands in, the seeds, and the uniforms where a kernel takes them), so the law
of a correct kernel's output is known exactly. Four layouts:

- ``ragged`` (vLLM ``RejectionSampler``): flat draft ids with per-request counts and
  cumulative offsets; target LOGITS, one row per draft token plus one bonus row per request;
  optional draft probabilities (None = the one-hot path); per-request temperature (0 =
  greedy), top-k (0 = off), top-p (1 = off) and min-p (0 = off; checked only when the kernel
  declares ``KernelSpec.min_p``).
- ``padded`` (FlashInfer ``chain_speculative_sampling``): ``[batch, k]`` draft ids, processed
  draft probabilities ``[batch, k, V]`` and target probabilities ``[batch, k + 1, V]`` (the
  bonus row inside); -1 after a request's drafts when ``KernelSpec.padding`` is set.
- ``single`` (transformers ``_speculative_sampling``): one request; draft and target given as
  probabilities and as logits (log of the probabilities, -inf where they are 0).
- ``tree`` (SGLang / EAGLE / SpecInfer): a token tree per request as first-child /
  next-sibling arrays, a target law at every node, optional draft laws (the law a node's
  children were drawn from), explicit uniforms.
- ``model`` (block resampling, hierarchical speculative decoding, tree re-drafting: kernels
  that call the models themselves): per-request prompts, the block size k and two exact
  models, ``target`` and ``draft`` (:class:`speceq.kernels.table_models.TableModel`: a next-token
  law for every prefix, on the draft path or off it). The kernel draws its own drafts with
  the generator (or the seeds, or the optional uniforms) and returns the emitted block.

A request's tensors are valid during its call only: the check reuses the memory of the large
inputs (logits, probabilities) for the next call, so a kernel may modify them in place but
must not keep them. (The padded and tree layouts hand the same rows to consecutive calls and
compare them with speceq's tables; a kernel that writes into them makes the check copy every
call's inputs and collect the scenario again: :func:`speceq.kernels.kernel_calls.run_scenario`.)

Every chain layout returns ``tokens`` ``[batch, >= max drafts + 1]``: the accepted drafts, then
one recovered or bonus token, then -1. A tree kernel returns the accepted path and its tokens.
A model-layout kernel returns the emitted block ``[batch, width]``: 1 to k + 1 tokens, then -1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from speceq.errors import ConfigError

#: Input layouts a kernel can take.
LAYOUTS = ("ragged", "padded", "single", "tree", "model")
#: Lossless chain verification methods: the first four have an accepted-length law speceq knows
#: exactly (it is tested); ``lossless`` claims only that the emitted tokens follow the target law
#: (token tests only, no accepted-length law).
CHAIN_METHODS = ("standard", "one-hot", "exact-match", "block", "lossless")
#: Methods of the model layout: ``lossless`` (lossless as a block; token tests only).
MODEL_METHODS = ("lossless",)
#: Lossless tree methods: ``target-only`` (distinct sibling tokens, the draft law unused, as
#: SGLang's target-only kernel) and ``multi-draft`` (siblings drawn independently from the
#: node's draft law, recursive rejection as SpecInfer).
TREE_METHODS = ("target-only", "multi-draft")
#: Methods whose one-position components (accepted token given accepted, recovered token given
#: rejected) have a closed form: the token-wise chain methods.
TOKENWISE_METHODS = ("standard", "one-hot", "exact-match")


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelSpec:
    """What a kernel claims and accepts; the check builds only inputs the kernel takes.

    layout: one of :data:`LAYOUTS`. method: the declared verification method (its length law
    is tested): :data:`CHAIN_METHODS` for chains, :data:`TREE_METHODS` for trees. ``one-hot``
    means the kernel gets no draft probabilities (``draft_probs`` is None) and accepts a draft
    d with probability p(d). lossy: the method is lossy by design (typical acceptance,
    thresholds < 1, ensemble weights): its TV to the target law is measured with a confidence
    interval and it never passes. params: the kernel applies per-request temperature / top-k /
    top-p itself (ragged only). min_p: it also applies per-request min-p (``RaggedRequest.min_p``),
    in vLLM's order: temperature, min-p, top-k, top-p (needs params); a kernel without it gets
    no request with min-p > 0 (the default scenarios say they skipped min-p; given scenarios with
    min-p are refused). greedy: it handles temperature-0 rows in a mixed batch (needs
    params). uniforms: it uses the injected ``uniforms`` / ``sample_uniforms`` (then boundary
    uniforms 0 and 1 - ulp are checked). padding: padded layout only, shorter requests' draft
    ids are padded with -1. nan_rows: the kernel promises valid output (ids in [0, V), the -1
    structure) when a target row is NaN; then requests with a NaN row are checked for it. max_draft: most draft tokens per request (tree: most nodes - 1).
    max_vocab: largest vocabulary the check builds. The ``model`` layout takes
    :data:`MODEL_METHODS` and k = ``max_draft``.
    """

    layout: str = "ragged"
    method: str = "standard"
    lossy: bool = False
    params: bool = False
    min_p: bool = False
    greedy: bool = False
    uniforms: bool = False
    padding: bool = False
    nan_rows: bool = False
    max_draft: int = 3
    max_vocab: int = 256_000
    name: str = ""

    def __post_init__(self) -> None:
        where = f"KernelSpec({self.name or self.layout})"
        if self.layout not in LAYOUTS:
            raise ConfigError(f"layout must be one of {LAYOUTS}, got {self.layout!r}", where=f"{where}.layout")
        methods = {"tree": TREE_METHODS, "model": MODEL_METHODS}.get(self.layout, CHAIN_METHODS)
        if self.method not in methods and not self.lossy:
            raise ConfigError(f"method must be one of {methods} for the {self.layout} layout (or declare "
                              f"lossy=True), got {self.method!r}", where=f"{where}.method")
        if (self.params or self.greedy) and self.layout != "ragged":
            raise ConfigError("per-request parameters and greedy rows exist in the ragged layout only "
                              "(the other layouts take processed probabilities)", where=where)
        if self.min_p and not self.params:
            raise ConfigError("min_p needs params=True (min-p is a per-request parameter, applied after the "
                              "temperature)", where=f"{where}.min_p")
        if self.greedy and not self.params:
            raise ConfigError("greedy rows need params=True (temperature 0 is a per-request parameter)", where=where)
        if self.nan_rows and self.layout == "model":
            raise ConfigError("the model layout's models never return NaN rows", where=f"{where}.nan_rows")
        if self.padding and self.layout != "padded":
            raise ConfigError("padding applies to the padded layout only", where=f"{where}.padding")
        if not (isinstance(self.max_draft, int) and 1 <= self.max_draft <= 16):
            raise ConfigError(f"max_draft must be an integer in [1, 16], got {self.max_draft!r}",
                              where=f"{where}.max_draft")
        if not (isinstance(self.max_vocab, int) and self.max_vocab >= 2):
            raise ConfigError(f"max_vocab must be an integer >= 2, got {self.max_vocab!r}", where=f"{where}.max_vocab")

    @property
    def takes_draft_probs(self) -> bool:
        """Whether the kernel is handed the draft law: every method but the one-hot path and target-only
        trees (their children are fixed tokens, verified against the target law alone)."""
        return self.method not in ("one-hot", "target-only")

    def with_name(self, name: str) -> KernelSpec:
        return replace(self, name=name)


@dataclass(frozen=True, slots=True, kw_only=True)
class RaggedRequest:
    """One batch in vLLM's layout (all tensors on the check's device).

    Request r has ``num_draft_tokens[r]`` drafts; its draft positions are the flat indices
    ``cu_num_draft_tokens[r] - num_draft_tokens[r] ...`` of ``draft_token_ids`` / ``draft_probs``;
    ``target_logits`` has ``num_tokens + batch`` rows, request r's draft rows then its bonus row,
    addressed by ``target_logits_indices`` (one per draft token) and ``bonus_logits_indices``.
    ``uniforms`` (acceptance, one per draft token, in [0, 1)) and ``sample_uniforms`` (the
    recovered or bonus draw, one per request) are speceq's; a kernel that draws its own uses
    ``generator`` (seeded per call) or ``seeds`` (one per request, for per-request generators).
    ``min_p`` (float32 ``[batch]``, 0 = off) is the per-request min-p; the check fills it for every
    call (all zeros unless the kernel declares ``KernelSpec.min_p``); None for requests built elsewhere.
    """

    vocab_size: int
    num_draft_tokens: tuple[int, ...]
    cu_num_draft_tokens: torch.Tensor  # int32 [batch], inclusive cumulative sum
    draft_token_ids: torch.Tensor  # int64 [num_tokens]
    draft_probs: torch.Tensor | None  # float32 [num_tokens, V]; None on the one-hot path
    target_logits: torch.Tensor  # float32 [num_tokens + batch, V]
    target_logits_indices: torch.Tensor  # int64 [num_tokens]
    bonus_logits_indices: torch.Tensor  # int64 [batch]
    temperature: torch.Tensor  # float32 [batch]; 0 = greedy
    top_k: torch.Tensor  # int64 [batch]; 0 = off
    top_p: torch.Tensor  # float32 [batch]; 1 = off
    uniforms: torch.Tensor  # float64 [num_tokens]
    sample_uniforms: torch.Tensor  # float64 [batch]
    seeds: torch.Tensor  # int64 [batch]
    generator: torch.Generator
    min_p: torch.Tensor | None = None  # float32 [batch]; 0 = off

    @property
    def batch_size(self) -> int:
        return len(self.num_draft_tokens)

    @property
    def num_tokens(self) -> int:
        return int(self.draft_token_ids.shape[0])

    @property
    def max_spec_len(self) -> int:
        return max(self.num_draft_tokens, default=0)

    @property
    def all_greedy(self) -> bool:
        return bool((self.temperature == 0).all())

    @property
    def all_random(self) -> bool:
        return bool((self.temperature != 0).all())


class _ProbLogits:
    """``target_logits`` / ``draft_logits`` of a request that carries processed probabilities (-inf at 0)."""

    __slots__ = ()
    target_probs: torch.Tensor
    draft_probs: torch.Tensor | None

    @property
    def target_logits(self) -> torch.Tensor:
        return torch.log(self.target_probs)

    @property
    def draft_logits(self) -> torch.Tensor | None:
        return None if self.draft_probs is None else torch.log(self.draft_probs)


@dataclass(frozen=True, slots=True, kw_only=True)
class PaddedRequest(_ProbLogits):
    """One batch in FlashInfer's layout: every request has k = ``draft_token_ids.shape[1]`` slots.

    Request r's drafts are ``draft_token_ids[r, :num_draft_tokens[r]]`` (then -1 when the spec
    allows padding); ``target_probs[r, num_draft_tokens[r]]`` is its bonus row (later rows repeat
    it). Probabilities are processed (no temperature or truncation left to apply); the logits
    are their logarithms (-inf at 0) for kernels that take logits.
    """

    vocab_size: int
    num_draft_tokens: tuple[int, ...]
    draft_token_ids: torch.Tensor  # int64 [batch, k]
    draft_probs: torch.Tensor | None  # float32 [batch, k, V]
    target_probs: torch.Tensor  # float32 [batch, k + 1, V]
    uniforms: torch.Tensor  # float64 [batch, k]
    sample_uniforms: torch.Tensor  # float64 [batch]
    seeds: torch.Tensor  # int64 [batch]
    generator: torch.Generator

    @property
    def batch_size(self) -> int:
        return int(self.draft_token_ids.shape[0])


@dataclass(frozen=True, slots=True, kw_only=True)
class SingleRequest(_ProbLogits):
    """One request (transformers' layout): k drafts, draft rows [k, V], target rows [k + 1, V]."""

    vocab_size: int
    draft_token_ids: torch.Tensor  # int64 [k]
    draft_probs: torch.Tensor | None  # float32 [k, V]
    target_probs: torch.Tensor  # float32 [k + 1, V]
    uniforms: torch.Tensor  # float64 [k]
    sample_uniform: float
    seed: int
    generator: torch.Generator

    @property
    def num_draft_tokens(self) -> int:
        return int(self.draft_token_ids.shape[0])


@dataclass(frozen=True, slots=True, kw_only=True)
class TreeRequest:
    """One batch of token trees, N nodes each (SGLang's arrays, in speceq's names).

    Node 0 is the root (the last committed token; ``tokens[:, 0]`` is unused). ``first_child``
    and ``next_sibling`` are -1 where there is none. ``target_probs[b, n]`` is the target law of
    the token after node n's path; ``draft_probs[b, n]`` the law node n's children were drawn
    from (None for target-only trees). ``uniforms[b, n]`` is the coin used at node n,
    ``sample_uniforms[b]`` the final draw's uniform.
    """

    vocab_size: int
    tokens: torch.Tensor  # int64 [batch, N]
    first_child: torch.Tensor  # int64 [batch, N]
    next_sibling: torch.Tensor  # int64 [batch, N]
    target_probs: torch.Tensor  # float32 [batch, N, V]
    draft_probs: torch.Tensor | None  # float32 [batch, N, V]
    uniforms: torch.Tensor  # float64 [batch, N]
    sample_uniforms: torch.Tensor  # float64 [batch]
    seeds: torch.Tensor  # int64 [batch]
    generator: torch.Generator

    @property
    def batch_size(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def num_nodes(self) -> int:
        return int(self.tokens.shape[1])


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelRequest:
    """One batch for a kernel that calls the models itself (the ``model`` layout).

    ``prompts[b]`` is request b's prefix (all of one length per call); the kernel emits a block
    of at most k + 1 tokens after it. ``target`` and ``draft`` are exact models
    (:class:`speceq.kernels.table_models.TableModel`): ``target(prefixes [N, T]) -> probabilities [N, V]``
    and ``target.block(prefixes, tokens)`` for the laws along a drafted block; the draft model
    is tied to the target (its law at a prefix is derived from the target's). The kernel draws
    its drafts and coins with ``generator`` (seeded per call), ``seeds`` (one per request), or
    ``uniforms`` (``[batch, 4 (k + 1)]`` float64 in [0, 1), when the spec declares uniforms; a
    kernel uses them in any fixed order and may ignore the rest).
    """

    vocab_size: int
    k: int
    prompts: torch.Tensor  # int64 [batch, T]
    target: Any  # speceq.kernels.table_models.TableModel
    draft: Any  # speceq.kernels.table_models.TableModel
    seeds: torch.Tensor  # int64 [batch]
    generator: torch.Generator
    uniforms: torch.Tensor | None = None  # float64 [batch, 4 (k + 1)]

    @property
    def batch_size(self) -> int:
        return int(self.prompts.shape[0])


Request = RaggedRequest | PaddedRequest | SingleRequest | TreeRequest | ModelRequest


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """What a kernel returns.

    tokens: chain layouts ``[batch, width]`` (single: ``[width]`` or ``[1, width]``), the
    accepted drafts then one more token then -1; tree: the tokens of the accepted path then
    the final token, -1 padded. emitted_draft_counts: the kernel's own counter of accepted
    drafts per request, when it keeps one (checked against the tokens). accepted_nodes: tree
    only, the accepted node indices along the path (root excluded), -1 padded.
    """

    tokens: Any
    emitted_draft_counts: Any = None
    accepted_nodes: Any = None


@dataclass(frozen=True, slots=True)
class Kernel:
    """A kernel function with the spec that says what it takes and claims."""

    fn: Callable[[Any], Any]
    spec: KernelSpec = field(default_factory=KernelSpec)

    def __call__(self, request: Any) -> Outcome:
        result = self.fn(request)
        if isinstance(result, Outcome):
            return result
        if isinstance(result, tuple) and result and not isinstance(result[0], (int, float)):
            return Outcome(tokens=result[0], emitted_draft_counts=result[1] if len(result) > 1 else None)
        return Outcome(tokens=result)

    @property
    def name(self) -> str:
        return self.spec.name or getattr(self.fn, "__qualname__", type(self.fn).__name__)


def kernel(**spec: Any) -> Callable[[Callable[[Any], Any]], Kernel]:
    """Decorator: ``@kernel(layout="padded", method="standard")`` turns a function into a :class:`Kernel`."""
    made = KernelSpec(**spec)

    def wrap(fn: Callable[[Any], Any]) -> Kernel:
        name = made.name or getattr(fn, "__qualname__", "kernel")
        return Kernel(fn, made.with_name(name))

    return wrap


def as_kernel(obj: Any, spec: KernelSpec | None = None) -> Kernel:
    """A :class:`Kernel` from a Kernel, or a callable plus a spec (``spec`` overrides the kernel's own)."""
    if isinstance(obj, Kernel):
        return obj if spec is None else Kernel(obj.fn, spec)
    if not callable(obj):
        raise ConfigError(f"a kernel must be callable, got {type(obj).__name__}", where="kernel")
    own = getattr(obj, "speceq_kernel_spec", None)
    chosen = spec or own or KernelSpec()
    if not isinstance(chosen, KernelSpec):
        raise ConfigError(f"speceq_kernel_spec must be a KernelSpec, got {type(chosen).__name__}", where="kernel")
    if not chosen.name:
        chosen = chosen.with_name(getattr(obj, "__qualname__", type(obj).__name__))
    return Kernel(obj, chosen)
