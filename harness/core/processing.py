"""Logit processing shared by every engine of the project and by the oracle.

One implementation, so the baseline sampler, the speculative sampler (draft and target
alike) and the oracle's teacher-forced scoring apply exactly the same transformation.

Two named orders (``SamplingParams.processing``), on raw next-token logits ``[..., vocab]``:

=====  ================================================================================
vllm   ignore_eos, logit_bias, repetition, frequency, presence, [greedy], temperature,
       min_p, top-k, top-p: the order of vLLM's V1 sampler (logits processors, then
       penalties, then temperature and the argmax-invariant min-p, then top-k / top-p)
hf     ignore_eos, logit_bias, repetition, [greedy], temperature, top-k, top-p, min_p:
       transformers' ``generate()`` order (SequenceBias, RepetitionPenalty, then the
       Temperature, TopK, TopP and MinP warpers); no presence or frequency penalty
=====  ================================================================================

The steps:

- ``ignore_eos``: the EOS logit is set to -inf.
- ``structured_outputs`` (both orders, first): the tokens the row's grammar state does not allow
  (``TokenHistory.allowed``) are set to -inf.
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
- ``top_k`` (> 0): keep the k largest logits (ties at the k-th value to the lowest ids).
- ``top_p`` (< 1): sort the remaining probabilities descending (ties by token id), keep
  the shortest prefix whose mass reaches ``top_p`` (a token is kept when the mass strictly
  before it is < top_p), renormalise.

The penalties depend on the row's own history: :class:`TokenHistory` holds, per row (and per
position when a verifier scores several positions at once), which tokens its prompt holds
and how often each token was generated so far. Transformers keeps ties at the top-k and
top-p boundaries differently (all tied tokens); with distinct logits the ``hf`` order equals
transformers' processors (tested to 1e-6).
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
    """Drop (-inf) the tokens whose probability under softmax(x) is below ``min_p`` times the largest.

    ``min_p``: one value (0 = off), or a tensor broadcastable to ``[..., 1]`` with one value per row
    (a row's 0 drops nothing), as the kernel check's ragged batches carry per-request min-p.
    """
    if not isinstance(min_p, torch.Tensor) and min_p <= 0.0:
        return x
    probs = torch.softmax(x, dim=-1)
    cut = probs < min_p * probs.amax(dim=-1, keepdim=True)
    return x.masked_fill(cut, float("-inf"))


def top_k_cut(x: torch.Tensor, top_k: int) -> torch.Tensor:  # [..., V] logits -> [..., V] logits
    """Keep the ``top_k`` largest logits (ties at the k-th value to the lowest ids); 0 = off."""
    if not 0 < top_k < x.shape[-1]:
        return x
    # stable descending sort: equal logits keep ascending-id order
    order = torch.sort(x, dim=-1, descending=True, stable=True).indices
    return x.scatter(-1, order[..., top_k:], float("-inf"))


def top_p_cut(probs: torch.Tensor, top_p: float) -> torch.Tensor:  # [..., V] probabilities -> renormalised
    """Keep the nucleus of mass ``top_p`` (:func:`top_p_keep`) and renormalise; 1 = off."""
    if top_p >= 1.0:
        return probs
    keep = top_p_keep(probs, top_p)
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
    grammar mask (``history.allowed``) comes first, before every other step, as vLLM applies the
    structured-output bitmask to the logits before its sampler.
    """
    x = logits.float()
    if params.ignore_eos and eos_token_id is not None:
        x = x.clone()
        x[..., eos_token_id] = float("-inf")
    x = grammar_cut(x, params, history)
    x = bias_and_penalties(x, params, history)
    if params.greedy:
        idx = x.argmax(dim=-1, keepdim=True)  # first maximal index
        return torch.zeros_like(x).scatter_(-1, idx, 1.0)
    x = x / params.temperature
    if params.processing == "hf":  # transformers: TopK, TopP, then MinP
        probs = top_p_cut(torch.softmax(top_k_cut(x, params.top_k), dim=-1), params.top_p)
        if params.min_p > 0.0:
            probs = torch.where(probs < params.min_p * probs.amax(dim=-1, keepdim=True), torch.zeros_like(probs), probs)
            probs = probs / probs.sum(dim=-1, keepdim=True)
        return probs
    x = top_k_cut(min_p_cut(x, params.min_p), params.top_k)
    return top_p_cut(torch.softmax(x, dim=-1), params.top_p)


#: Candidate counts :func:`top_p_keep` tries (on CPU) before sorting a whole vocabulary.
TOP_P_CANDIDATES = (256, 4096)


def _top_p_keep_sorted(probs: torch.Tensor, top_p: float) -> torch.Tensor:  # [rows, V] -> [rows, V] bool
    """The top-p rule by a stable sort of every row (descending, ties by ascending token id)."""
    sorted_p, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    mass_before = torch.cumsum(sorted_p, dim=-1) - sorted_p
    return torch.zeros_like(mass_before, dtype=torch.bool).scatter(-1, order, mass_before < top_p)


def top_p_keep(probs: torch.Tensor, top_p: float) -> torch.Tensor:  # [..., V] -> [..., V] bool
    """Which tokens top-p keeps: those whose mass ranked strictly before them is < ``top_p``.

    The same mask as a stable descending sort of the whole row, bit for bit, at a fraction of
    its cost on a large vocabulary (a stable sort of 64 x 49 152 probabilities takes ~0.26 s of
    CPU, ``topk`` of 257 ~0.01 s): on CPU, each row first takes its ``k + 1`` largest
    probabilities (:data:`TOP_P_CANDIDATES`), ordered as the stable sort orders them. Their
    prefix sums are the sort's first ``k + 1`` (CPU ``cumsum`` accumulates sequentially, so a
    prefix does not depend on what follows it), and when the mass before the ``k + 1``-th
    reaches ``top_p`` every later token is dropped too (the mass before a token never decreases
    down the ranking, and rounding is monotone). A row whose ``k``-th and ``k + 1``-th
    probabilities tie (the candidates might not be the sort's first ``k``), or whose nucleus
    is longer, tries the next ``k``, then the whole sort. Other devices sort the whole row.
    """
    shape = probs.shape
    flat = probs.reshape(-1, shape[-1])
    vocab = flat.shape[-1]
    if flat.device.type != "cpu" or flat.shape[0] == 0:
        return _top_p_keep_sorted(flat, top_p).reshape(shape)
    keep = torch.zeros_like(flat, dtype=torch.bool)
    todo = torch.arange(flat.shape[0])
    for k in TOP_P_CANDIDATES:
        if k + 1 >= vocab or len(todo) == 0:
            break
        rows = flat[todo]
        idx = torch.topk(rows, k + 1, dim=-1).indices.sort(dim=-1).values  # ascending ids
        vals = rows.gather(-1, idx)
        v_sorted, order = torch.sort(vals, dim=-1, descending=True, stable=True)  # ties: lower id first
        ids = idx.gather(-1, order)
        mass_before = torch.cumsum(v_sorted, dim=-1) - v_sorted
        decided = (mass_before[:, k] >= top_p) & (v_sorted[:, k - 1] > v_sorted[:, k])
        if bool(decided.any()):
            part = torch.zeros_like(rows[decided], dtype=torch.bool)
            part.scatter_(-1, ids[decided, :k], mass_before[decided, :k] < top_p)
            keep[todo[decided]] = part
        todo = todo[~decided]
    if len(todo):
        keep[todo] = _top_p_keep_sorted(flat[todo], top_p)
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
