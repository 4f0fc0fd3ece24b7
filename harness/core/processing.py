"""Logit processing shared by every engine of the project and by the oracle.

One implementation, so the baseline sampler, the speculative sampler (draft and target
alike) and the oracle's teacher-forced scoring apply exactly the same transformation.

Two named orders (``SamplingParams.processing``), on raw next-token logits ``[..., vocab]``:

=====  ================================================================================
vllm   ignore_eos, logit_bias, repetition, frequency, presence, [greedy], temperature,
       min_p, top-k, top-p: the order of vLLM's V1 sampler (logits processors, then
       penalties, then temperature and the argmax-invariant min-p, then top-k / top-p)
hf     ignore_eos, logit_bias, repetition, grammar, [greedy], temperature, top-k, top-p,
       min_p: transformers' ``generate()`` order (SequenceBias, RepetitionPenalty,
       SuppressTokens, then a user's logits processors, where a grammar goes, then the
       Temperature, TopK, TopP and MinP warpers); no presence or frequency penalty
=====  ================================================================================

The steps:

- ``ignore_eos``: the EOS logit is set to -inf.
- ``structured_outputs`` (grammar): the tokens the row's grammar state does not allow
  (``TokenHistory.allowed``) are set to -inf; first in the vllm order (vLLM applies the
  structured-output bitmask before its sampler), after the penalties in the hf order (where
  transformers puts a user's logits processor). Setting -inf commutes with the bias and the
  penalties (they leave -inf at -inf), so the two places give the same law bit for bit; the
  order is kept as each library runs it.
- ``logit_bias``: ``bias[t]`` is added to token t's logit.
- ``repetition_penalty`` r, over every token of the row's prompt and of its generated
  tokens so far: a positive logit is divided by r, a negative one multiplied by r.
- ``frequency_penalty`` f and ``presence_penalty`` a, over the generated tokens only:
  ``logit -= f * count(t) + a * (count(t) > 0)`` (OpenAI's definition).
- greedy (``temperature == 0``): a one-hot on the argmax of the logits so far (ties to the
  lowest token id); the truncations below never change an argmax.
- ``temperature`` T: logits / T.
- ``min_p``: tokens whose probability is below ``min_p`` times the largest one are dropped
  (a ratio, so it is the same before or after a truncation that keeps the largest token).
- ``top_k`` (> 0): keep every logit >= the k-th largest (all the tokens tied with the k-th
  value stay, so more than k may), as vLLM's sampler and transformers' ``TopKLogitsWarper`` do.
- ``top_p`` (< 1): rank the remaining probabilities descending, keep the shortest prefix whose
  mass reaches ``top_p`` (a token is kept when the mass from it to the end of the ranking is
  > 1 - top_p, i.e. the mass strictly before it is < top_p; the most likely token always),
  renormalise. Tied tokens are ranked as the libraries rank them (:func:`top_p_keep`): in the
  reverse of ``torch.sort(logits)`` (ascending, not stable), so when a tie straddles the cut
  the same tied tokens are kept as in vLLM and transformers running on the same torch build.

The penalties depend on the row's own history: :class:`TokenHistory` holds, per row (and per
position when a verifier scores several positions at once), which tokens its prompt holds
and how often each token was generated so far. The ``hf`` order equals transformers'
processors, ties included (tested to 1e-6).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from speceq.core.params import SamplingParams
from speceq.errors import ConfigError


@dataclass(frozen=True, slots=True)
class TokenHistory:
    """The tokens a row has seen, for the penalties and the grammar: ``[..., vocab]`` tensors broadcastable to the logits.

    prompt_mask: bool, token t occurs in the row's prompt. output_counts: float32, how often
    token t was generated so far (0 before the first generated token). allowed: bool, the tokens
    the case's grammar (``structured_outputs``) allows after the row's tokens so far, None without
    a grammar; the grammar state lives with the caller (:mod:`speceq.models.grammar`), which sets it
    per position (:meth:`with_allowed`).
    """

    prompt_mask: torch.Tensor
    output_counts: torch.Tensor
    allowed: torch.Tensor | None = None

    def with_allowed(self, allowed: torch.Tensor | None) -> TokenHistory:
        """This history with the grammar mask ``allowed`` (broadcastable to the logits)."""
        return TokenHistory(self.prompt_mask, self.output_counts, allowed)

    def extended(self, drafts: torch.Tensor) -> TokenHistory:
        """Histories ``[rows, k+1, V]`` at each position of a verified block: position j has
        ``drafts[:, :j]`` (``drafts`` [rows, k]) appended to this ``[rows, V]`` history. The grammar
        mask is not carried (it needs the grammar state: the caller sets the block's masks)."""
        rows, k = drafts.shape
        V = self.output_counts.shape[-1]
        step = torch.zeros((rows, k + 1, V), dtype=self.output_counts.dtype, device=self.output_counts.device)
        if k:
            step[:, 1:].scatter_(-1, drafts[:, :, None], 1.0)
        counts = self.output_counts[:, None, :] + step.cumsum(dim=1)
        return TokenHistory(prompt_mask=self.prompt_mask[:, None, :].expand(rows, k + 1, V), output_counts=counts)

    def select(self, rows: torch.Tensor) -> TokenHistory:
        """The histories of ``rows`` (indices into the first dimension)."""
        return TokenHistory(prompt_mask=self.prompt_mask[rows], output_counts=self.output_counts[rows],
                            allowed=None if self.allowed is None else self.allowed[rows])

    def appended(self, tokens: Sequence[Sequence[int]]) -> TokenHistory:
        """This ``[rows, V]`` history with ``tokens[r]`` generated by row r (without a grammar mask: it moved on)."""
        counts = self.output_counts.clone()
        for r, toks in enumerate(tokens):
            for t in toks:
                counts[r, int(t)] += 1.0
        return TokenHistory(prompt_mask=self.prompt_mask, output_counts=counts)


def token_history(
    prompts: Sequence[Sequence[int]],
    outputs: Sequence[Sequence[int]],
    vocab_size: int,
    device: str | torch.device = "cpu",
) -> TokenHistory:
    """The ``[rows, vocab_size]`` history of rows with these prompts and generated tokens so far."""
    rows = len(prompts)
    mask = torch.zeros((rows, vocab_size), dtype=torch.bool, device=device)
    counts = torch.zeros((rows, vocab_size), dtype=torch.float32, device=device)
    for r, (prompt, out) in enumerate(zip(prompts, outputs, strict=True)):
        if len(prompt):
            mask[r, torch.as_tensor(list(prompt), dtype=torch.long, device=device)] = True
        for t in out:
            counts[r, int(t)] += 1.0
    return TokenHistory(prompt_mask=mask, output_counts=counts)


def bias_and_penalties(
    logits: torch.Tensor,  # [..., vocab] float32
    params: SamplingParams,
    history: TokenHistory | None,
) -> torch.Tensor:  # [..., vocab]
    """logit_bias, then the repetition, frequency and presence penalties (the same in both orders)."""
    x = logits
    if params.logit_bias:
        ids = torch.tensor([t for t, _ in params.logit_bias], dtype=torch.long, device=x.device)
        bias = torch.zeros(x.shape[-1], dtype=x.dtype, device=x.device)
        bias[ids] = torch.tensor([b for _, b in params.logit_bias], dtype=x.dtype, device=x.device)
        x = x + bias
    if not params.uses_history:
        return x
    if history is None:
        raise ConfigError("the penalties need the row's token history; none was given", where="process_logits.history")
    counts = history.output_counts.to(x.dtype)
    if params.repetition_penalty != 1.0:
        seen = history.prompt_mask | (counts > 0)
        r = params.repetition_penalty
        x = torch.where(seen, torch.where(x > 0, x / r, x * r), x)
    if params.frequency_penalty != 0.0:
        x = x - params.frequency_penalty * counts
    if params.presence_penalty != 0.0:
        x = x - params.presence_penalty * (counts > 0).to(x.dtype)
    return x


def grammar_cut(
    logits: torch.Tensor, params: SamplingParams, history: TokenHistory | None
) -> torch.Tensor:  # [..., V] logits -> [..., V] logits
    """Drop (-inf) the tokens the case's grammar does not allow (``history.allowed``); unchanged without a grammar."""
    if params.structured_outputs is None:
        return logits
    if history is None or history.allowed is None:
        raise ConfigError("the grammar needs each row's allowed tokens; none were given", where="process_logits.history")
    return logits.masked_fill(~history.allowed, float("-inf"))


def min_p_cut(x: torch.Tensor, min_p: float | torch.Tensor) -> torch.Tensor:  # [..., V] logits -> [..., V] logits
    """Drop (-inf) the tokens whose probability under softmax(x) is strictly below ``min_p`` times the largest.

    As vLLM's ``MinPLogitsProcessor`` and transformers' ``MinPLogitsWarper`` (``probs < min_p * max``):
    tokens tied at the threshold, and every token tied with the largest, are kept.

    ``min_p``: one value (0 = off), or a tensor broadcastable to ``[..., 1]`` with one value per row
    (a row's 0 drops nothing), as the kernel check's ragged batches carry per-request min-p.
    """
    if not isinstance(min_p, torch.Tensor) and min_p <= 0.0:
        return x
    probs = torch.softmax(x, dim=-1)
    cut = probs < min_p * probs.amax(dim=-1, keepdim=True)  # strictly below: a token at the threshold stays
    return x.masked_fill(cut, float("-inf"))


def top_k_cut(x: torch.Tensor, top_k: int) -> torch.Tensor:  # [..., V] logits -> [..., V] logits
    """Keep every logit >= the ``top_k``-th largest; 0 = off.

    Tokens tied with the k-th value all stay (more than k tokens may remain), as in vLLM's
    sampler (``logits < kth_value`` masked) and transformers' ``TopKLogitsWarper``.
    """
    if not 0 < top_k < x.shape[-1]:
        return x
    kth = torch.topk(x, top_k, dim=-1).values[..., -1:]
    return x.masked_fill(x < kth, float("-inf"))


def top_p_cut(
    probs: torch.Tensor, top_p: float, key: torch.Tensor | None = None, processing: str = "vllm"
) -> torch.Tensor:  # [..., V] probabilities -> renormalised
    """Keep the nucleus of mass ``top_p`` (:func:`top_p_keep`, ties ranked by ``key``) and renormalise; 1 = off."""
    if top_p >= 1.0:
        return probs
    keep = top_p_keep(probs, top_p, key, processing)
    probs = torch.where(keep, probs, torch.zeros_like(probs))
    return probs / probs.sum(dim=-1, keepdim=True)


def process_logits(
    logits: torch.Tensor,  # [..., vocab]
    params: SamplingParams,
    *,
    eos_token_id: int | None = None,
    history: TokenHistory | None = None,
) -> torch.Tensor:  # [..., vocab], float32 probabilities summing to 1
    """Return the processed next-token probabilities for ``params`` in its ``processing`` order.

    ``history`` (broadcastable to ``logits``) is required when a penalty or a grammar is on; its
    grammar mask (``history.allowed``) comes first in the vllm order (vLLM applies the structured-output
    bitmask to the logits before its sampler) and after the bias and penalties in the hf order (a user's
    logits processor in transformers' ``generate()``).
    """
    x = logits.float()
    if params.ignore_eos and eos_token_id is not None:
        x = x.clone()
        x[..., eos_token_id] = float("-inf")
    if params.processing == "hf":
        x = grammar_cut(bias_and_penalties(x, params, history), params, history)
    else:
        x = bias_and_penalties(grammar_cut(x, params, history), params, history)
    if params.greedy:
        idx = x.argmax(dim=-1, keepdim=True)  # first maximal index
        return torch.zeros_like(x).scatter_(-1, idx, 1.0)
    x = x / params.temperature
    if params.processing == "hf":  # transformers: TopK, TopP, then MinP
        x = top_k_cut(x, params.top_k)  # TopPLogitsWarper sorts these (top-k's cut at -inf)
        probs = top_p_cut(torch.softmax(x, dim=-1), params.top_p, key=x, processing="hf")
        if params.min_p > 0.0:
            probs = torch.where(probs < params.min_p * probs.amax(dim=-1, keepdim=True), torch.zeros_like(probs), probs)
            probs = probs / probs.sum(dim=-1, keepdim=True)
        return probs
    x = min_p_cut(x, params.min_p)  # vLLM's sampler sorts these, then applies top-k and top-p in that order
    return top_p_cut(torch.softmax(top_k_cut(x, params.top_k), dim=-1), params.top_p, key=x, processing="vllm")


#: Candidate counts :func:`top_p_keep` tries (on CPU) before sorting a whole vocabulary.
TOP_P_CANDIDATES = (256, 4096)


def top_p_threshold(top_p: float, processing: str = "vllm") -> float:
    """The float32 value the library compares a token's cumulative mass with (the token goes when the mass is <= it).

    vLLM holds top_p in a float32 tensor and computes ``1 - p`` in float32; transformers compares
    with the Python float ``1 - top_p``, which torch casts to float32. The two differ by up to one
    float32 step (0.95: 0.0500000119 and 0.0500000007).
    """
    if processing == "vllm":
        return float(1.0 - torch.tensor(top_p, dtype=torch.float32))
    if processing == "hf":
        return float(torch.tensor(1.0 - top_p, dtype=torch.float32))
    raise ConfigError(f"unknown processing order {processing!r}; expected 'vllm' or 'hf'", where="top_p_threshold")


def _mass_from(v: torch.Tensor, total: torch.Tensor) -> torch.Tensor:  # [rows, n] descending, [rows, 1] -> [rows, n]
    """The mass from each position to the end of the ranking, itself included: ``total`` less the mass strictly
    before it (float64; never increasing down the ranking)."""
    c = torch.cumsum(v.double(), dim=-1)
    return total - torch.cat([torch.zeros_like(c[:, :1]), c[:, :-1]], dim=-1)


def _inside(v: torch.Tensor, total: torch.Tensor, threshold: float) -> torch.Tensor:  # [rows, n] -> [rows, n] bool
    """The positions of a descending ranking that top-p keeps: mass from them, rounded to float32 as the libraries'
    cumulative sums are, above ``threshold`` (:func:`top_p_threshold`); the first one always, as the libraries do."""
    inside = _mass_from(v, total).float() > threshold
    inside[:, 0] = True
    return inside


def _top_p_keep_sorted(
    probs: torch.Tensor, threshold: float, key: torch.Tensor, total: torch.Tensor
) -> torch.Tensor:  # [rows, V] -> [rows, V] bool
    """The top-p rule by a full sort of every row: descending probability, ties in reverse ``torch.sort(key)`` order."""
    order = torch.sort(key, dim=-1).indices.flip(-1)  # the libraries' ascending sort, read from its end
    v = probs.gather(-1, order)
    if v.shape[-1] > 1 and not bool((v[:, 1:] <= v[:, :-1]).all()):
        # key and probabilities rank two tokens differently (rounding): rank by probability, key order within ties
        v, perm = torch.sort(v, dim=-1, descending=True, stable=True)
        order = order.gather(-1, perm)
    return torch.zeros_like(v, dtype=torch.bool).scatter(-1, order, _inside(v, total, threshold))


def top_p_keep(
    probs: torch.Tensor, top_p: float, key: torch.Tensor | None = None, processing: str = "vllm"
) -> torch.Tensor:  # [..., V] -> [..., V] bool
    """Which tokens top-p keeps: those whose mass from them to the end of the ranking (their own included) is
    > ``1 - top_p`` (with probabilities summing to 1: the mass ranked strictly before them is < ``top_p``).

    The libraries' rule, as vLLM's sampler and transformers' ``TopPLogitsWarper`` compute it: sort
    the logits ascending, and drop tokens from the front while the cumulative mass is <= 1 - top_p
    (the last token always stays). Measuring the mass from the tail (accumulated in float64,
    rounded to float32 as their cumulative sums are) against their float32 ``1 - top_p``
    (:func:`top_p_threshold` of ``processing``) keeps speceq's cut within float rounding of
    theirs even when a row's float32 probabilities sum to 1 +- 1e-6, and on it when a mass
    falls exactly on the threshold.

    The ranking: descending probability; tied tokens in the reverse of ``torch.sort(key)``
    (ascending, not stable: the libraries' call), so the tied tokens that sort puts last are
    kept first. ``key`` (``[..., V]``, ordered as ``probs``): the logits the library sorts (vLLM:
    after min-p, before top-k; transformers: after top-k); default ``probs``. The tie order
    matters only when a tie straddles the cut (equal probabilities kept and dropped). Torch does
    not document the order of ties in an unstable sort; on CPU it is deterministic for given
    values (and not id order beyond 16 tokens), so the same call on the same values reproduces
    it. With another torch build, or on another device, the libraries may order ties
    differently (and vLLM's CUDA sampler is a Triton kernel with its own tie handling).

    The mask equals that of the full sort, bit for bit, at a fraction of its cost on a large
    vocabulary (a sort of 64 x 49 152 probabilities takes ~0.26 s of CPU, ``topk`` of 257
    ~0.01 s): on CPU, each row first takes its ``k + 1`` largest probabilities
    (:data:`TOP_P_CANDIDATES`), which are the sort's first ``k + 1`` values whatever the order
    of ties. Their prefix sums are the sort's (CPU ``cumsum`` accumulates sequentially, so a
    prefix does not depend on what follows it; the row's total is summed once for both paths),
    and when the ``k + 1``-th is dropped the kept positions are a prefix of length L <= k (the
    mass from a position never increases down the ranking). When the L-th and L+1-th values
    differ, the kept tokens are exactly those >= the L-th value. A row whose cut falls inside a
    tie (the tie order decides which tied tokens stay) or whose nucleus is longer tries the
    next ``k``, then the full sort of ``key``. Other devices sort the whole row.
    """
    shape = probs.shape
    flat = probs.reshape(-1, shape[-1])
    keys = flat if key is None else key.expand(shape).reshape(-1, shape[-1])
    total = flat.double().sum(dim=-1, keepdim=True)  # [rows, 1]: the same for both paths
    threshold = top_p_threshold(top_p, processing)
    vocab = flat.shape[-1]
    if flat.device.type != "cpu" or flat.shape[0] == 0:
        return _top_p_keep_sorted(flat, threshold, keys, total).reshape(shape)
    keep = torch.zeros_like(flat, dtype=torch.bool)
    todo = torch.arange(flat.shape[0])
    for k in TOP_P_CANDIDATES:
        if k + 1 >= vocab or len(todo) == 0:
            break
        rows = flat[todo]
        v = torch.topk(rows, k + 1, dim=-1).values  # descending: the full sort's first k + 1 values
        inside = _inside(v, total[todo], threshold)
        kept = inside.sum(dim=-1, keepdim=True)  # L >= 1: the kept positions are the first L
        last = v.gather(-1, (kept - 1).clamp(max=k))
        after = v.gather(-1, kept.clamp(max=k))
        decided = ~inside[:, k] & (last[:, 0] > after[:, 0])  # the cut inside the candidates, not across a tie
        if bool(decided.any()):
            keep[todo[decided]] = rows[decided] >= last[decided]
        todo = todo[~decided]
    if len(todo):
        keep[todo] = _top_p_keep_sorted(flat[todo], threshold, keys[todo], total[todo])
    return keep.reshape(shape)


def sample_from_probs(
    probs: torch.Tensor,  # [rows, vocab]
    generator: torch.Generator | None,
) -> torch.Tensor:  # [rows] int64
    """Draw one token per row by inverse CDF with one uniform per row.

    One uniform per row keeps the number of random draws fixed, so a seed reproduces a run
    exactly, and a row's draw does not depend on the other rows' vocabularies.
    """
    u = torch.rand(probs.shape[0], generator=generator, dtype=torch.float64, device=probs.device)
    return sample_at_uniforms(probs, u)


def sample_at_uniforms(
    probs: torch.Tensor,  # [rows, vocab]
    uniforms: torch.Tensor,  # [rows] float64 in [0, 1)
) -> torch.Tensor:  # [rows] int64
    """The token of each row at its uniform by inverse CDF on the normalised cumsum (never a zero-probability token)."""
    u = uniforms
    cdf = torch.cumsum(probs.double(), dim=-1)
    cdf = cdf / cdf[:, -1:]
    tok = torch.searchsorted(cdf, u[:, None], right=True).squeeze(-1)
    # guard against u landing past the last non-zero bin by rounding
    tok = tok.clamp_(max=probs.shape[-1] - 1)
    # never return a zero-probability token (can only happen by float rounding at edges)
    zero = probs.gather(-1, tok[:, None]).squeeze(-1) <= 0
    if bool(zero.any()):
        tok = torch.where(zero, probs.argmax(dim=-1), tok)
    return tok
