"""The batched draft/verify loop of :class:`~speceq.engines.reference.ReferenceSpeculativeEngine`.

Kept apart from the engine class so that the class shows only its hooks. The loop calls
every piece of arithmetic a mutant may change through the engine's hook methods
(:class:`SpeculativeHooks`). One step of a batch reads like the algorithm::

    drafted = _draft(...)      # the draft proposes d_1..d_k from its processed q
    verified = _verify(...)    # one target forward; accept a prefix; draw the next token
    _roll_back(...)            # forget rejected drafts in both KV caches
    finished = _emit(...)      # write accepted drafts + next token; stop at EOS / length

Cache bookkeeping per row (both models see the prompt minus its last token at prefill):
- target: every step feeds ``[pending, d_1..d_k]`` (``pending`` = the last committed token,
  not yet in the cache) and keeps ``pending, d_1..d_n`` after ``n`` acceptances.
- draft: every step first feeds the committed tokens it has not seen (1 token, or 2 after a
  step whose k drafts were all accepted, left-padded with an invalid dummy slot), then
  d_1..d_{k-1} (and d_k when the bonus hook needs the draft's q there).

Penalty history (only when a penalty is on): each row keeps its own ``[V]`` history (prompt mask
and generated-token counts, :class:`~speceq.core.processing.TokenHistory`) of what it has
committed. The draft's i-th proposal is processed with that history plus d_1..d_{i-1}; the
target's block position j with that history plus d_1..d_j (hook ``block_history``); the hook
``step_history`` gives the committed history a step starts from.

Grammar (only with ``params.structured_outputs``): each row keeps its own grammar state
(:class:`~speceq.models.grammar.RowGrammar`) of what it has committed. The draft's i-th proposal is
masked by that state advanced over d_1..d_{i-1}, the target's block position j by the state advanced
over d_1..d_j (both look-aheads are rolled back); hook ``grammar_commit`` advances the committed state
over the tokens a step emits.

Stop strings (only when ``params.stop`` is set): after each verification, hook ``stop_length``
finds where the row's text first holds a stop string among the tokens this step emits; the
row ends at that token, and the tokens after it in the block are dropped.

Random draws of a step, in order, from the batch's generator through hook ``draw_uniforms``: k draft
tokens, k accept uniforms (when k >= 1), one next token per row.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from speceq.core.params import SamplingParams
from speceq.core.processing import TokenHistory, sample_at_uniforms, token_history
from speceq.engines._batching import check_prompts, distinct_prompts, left_padded
from speceq.engines._kv import SlotCache
from speceq.engines.base import PAD_OUT, SampleBatch, SampleRequest
from speceq.engines.rejection import accept_prefix_lengths
from speceq.models.grammar import Grammar, RowGrammar
from speceq.models.torch_utils import batch_generator


class SpeculativeHooks(Protocol):
    """What the loop needs from a speculative engine: models, settings and hook methods.

    :class:`~speceq.engines.reference.ReferenceSpeculativeEngine` documents each hook.
    """

    name: str
    model: Any
    draft: Any
    k: int
    device: str
    vocab_size: int
    eos_token_id: int | None
    pad_id: int
    trace: bool

    @property
    def needs_bonus_draft_probs(self) -> bool: ...

    def process_target(
        self, logits: torch.Tensor, params: SamplingParams, history: TokenHistory | None = None
    ) -> torch.Tensor: ...

    def process_draft(
        self, logits: torch.Tensor, params: SamplingParams, history: TokenHistory | None = None
    ) -> torch.Tensor: ...

    def step_history(
        self, history: TokenHistory, last_token: torch.Tensor, has_output: torch.Tensor
    ) -> TokenHistory: ...

    def block_history(self, history: TokenHistory, draft_tokens: torch.Tensor) -> TokenHistory: ...

    def effective_target(self, target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor: ...

    def accept_probs(
        self, target_probs: torch.Tensor, draft_probs: torch.Tensor, draft_tokens: torch.Tensor
    ) -> torch.Tensor: ...

    def residual(self, target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor: ...

    def bonus_probs(self, target_probs: torch.Tensor, draft_probs: torch.Tensor | None) -> torch.Tensor: ...

    def position_ids(self, slots: SlotCache, valid: torch.Tensor) -> torch.Tensor: ...

    def rollback(self, slots: SlotCache, keep: torch.Tensor) -> None: ...

    def stop_length(self, row: list[int], committed: int, params: SamplingParams) -> int | None: ...

    def draw_uniforms(self, shape: tuple[int, ...], gen: torch.Generator, step: int) -> torch.Tensor: ...

    def grammar_commit(self, state: RowGrammar, emitted: list[int], accepted: int) -> None: ...


@dataclass(slots=True)
class _Counters:
    drafted: int = 0
    accepted: int = 0
    verify_steps: int = 0
    accept_tests: int = 0  # drafts whose accept test decided something: min(n + 1, k) per row-step

    def add_step(self, k: int, n_accepted: torch.Tensor) -> None:  # n_accepted: [rows] int64
        rows = int(n_accepted.shape[0])
        self.drafted += k * rows
        self.accepted += int(n_accepted.sum())
        self.verify_steps += rows
        self.accept_tests += int(torch.clamp(n_accepted + 1, max=k).sum()) if k > 0 else 0


@dataclass(slots=True)
class _Outputs:
    tokens: np.ndarray  # [rows, L] int64
    lengths: np.ndarray  # [rows] int64
    trace: np.ndarray | None  # [rows, L, vocab] float32


@dataclass(slots=True)
class _Batch:
    """Per-row state of the active rows of one batch (finished rows are dropped)."""

    target: SlotCache
    draft: SlotCache
    target_pending: torch.Tensor  # [rows] int64: last committed token, not yet in the target's cache
    draft_pending: list[list[int]]  # committed tokens the draft has not seen, per row
    generated: list[list[int]]  # tokens emitted so far, per row
    out_rows: list[int]  # output row of each active row
    history: TokenHistory | None  # [rows, V]: prompt and committed tokens per row (None without a penalty)
    grammar: list[RowGrammar] | None = None  # each row's committed grammar state (None without a grammar)


@dataclass(slots=True)
class _Drafted:
    """One step's proposals. ``ran``: the draft model ran this step (k >= 1 or the bonus hook needs q)."""

    draft_tokens: torch.Tensor  # [rows, k] int64
    draft_probs: torch.Tensor  # [rows, k, V]: processed q of each proposal
    bonus_draft_probs: torch.Tensor | None  # [rows, V]: q at the bonus position, when the hook needs it
    ran: bool
    fed_width: int  # width of the block of committed tokens fed to the draft this step
    fed_drafts: int  # proposals fed back to the draft this step


@dataclass(slots=True)
class _Verified:
    target_probs: torch.Tensor  # [rows, k+1, V]: processed p at pending, d_1..d_k
    n_accepted: torch.Tensor  # [rows] int64 in 0..k
    next_token: torch.Tensor  # [rows] int64: the replacement after a rejection, else the bonus token


def run_speculative(engine: SpeculativeHooks, request: SampleRequest) -> SampleBatch:
    """Sample every row of ``request`` with ``engine``'s hooks; see the module docstring."""
    check_prompts(request.prompts, engine.vocab_size, engine.name)
    start = time.perf_counter()
    layout = request.rows()
    L = request.params.max_new_tokens
    out = _Outputs(
        tokens=np.full((len(layout), L), PAD_OUT, dtype=np.int64),
        lengths=np.zeros(len(layout), dtype=np.int64),
        trace=np.zeros((len(layout), L, engine.vocab_size), dtype=np.float32) if engine.trace else None,
    )
    counters = _Counters()
    with torch.inference_mode():
        for b, lo in enumerate(range(0, len(layout), request.batch_size)):
            rows = np.arange(lo, min(lo + request.batch_size, len(layout)))
            prompts = [request.prompts[int(layout[r])] for r in rows]
            gen = batch_generator(request.seed, b, engine.device)
            _run_batch(engine, prompts, request.params, gen, rows, out, counters)
    info: dict[str, Any] = {"k": engine.k, "accept_tests": counters.accept_tests}
    if out.trace is not None:
        info["trace_probs"] = out.trace
    return SampleBatch(
        tokens=out.tokens,
        lengths=out.lengths,
        prompt_index=layout.astype(np.int64),
        drafted_tokens=counters.drafted,
        accepted_tokens=counters.accepted,
        verify_steps=counters.verify_steps,
        wall_time_s=time.perf_counter() - start,
        info=info,
    )


def _run_batch(
    engine: SpeculativeHooks,
    prompts: list[tuple[int, ...]],
    params: SamplingParams,
    gen: torch.Generator,
    out_rows: np.ndarray,  # [batch] output row of each batch row
    out: _Outputs,
    counters: _Counters,
) -> None:
    batch = _prefill(engine, prompts, out_rows)
    if params.uses_history:
        batch.history = token_history(prompts, [[] for _ in prompts], engine.vocab_size, engine.device)
    step = 0
    if params.structured_outputs is not None:
        grammar = Grammar(params, engine.vocab_size, engine.eos_token_id)
        batch.grammar = [grammar.row() for _ in prompts]
    while batch.out_rows:
        remaining = [params.max_new_tokens - len(g) for g in batch.generated]
        k = min(engine.k, max(remaining) - 1)  # never draft past the longest remaining row
        drafted = _draft(engine, batch, k, params, gen, step)
        verified = _verify(engine, batch, drafted, k, params, gen, step)
        step += 1
        counters.add_step(k, verified.n_accepted)
        _roll_back(engine, batch, drafted, verified.n_accepted, k)
        unfinished = _emit(engine, batch, drafted, verified, remaining, params, out)
        if not unfinished:
            break
        if len(unfinished) < len(batch.out_rows):
            _keep_rows(batch, unfinished)


def _feed(
    engine: SpeculativeHooks,
    slots: SlotCache,
    tokens: torch.Tensor,  # [rows, width]
    valid: torch.Tensor,  # [rows, width]
    *,
    last_only: bool = False,
) -> torch.Tensor:  # [rows, width, vocab] ([rows, 1, vocab] with last_only)
    return slots.forward(tokens, valid, engine.position_ids(slots, valid), last_only=last_only)


def _prefill(engine: SpeculativeHooks, prompts: list[tuple[int, ...]], out_rows: np.ndarray) -> _Batch:
    """Both caches hold every prompt but its last token, which is pending for both models."""
    dev = engine.device
    target = SlotCache(engine.model, len(prompts), dev)
    draft = SlotCache(engine.draft, len(prompts), dev)
    heads, source = distinct_prompts([p[:-1] for p in prompts], dev)
    if any(heads):
        ids, valid = left_padded(heads, engine.pad_id, dev)
        target.prefill(ids, valid, source, engine.position_ids, last_only=True)
        draft.prefill(ids, valid, source, engine.position_ids, last_only=True)
    return _Batch(
        target=target,
        draft=draft,
        target_pending=torch.tensor([p[-1] for p in prompts], dtype=torch.long, device=dev),
        draft_pending=[[p[-1]] for p in prompts],
        generated=[[] for _ in prompts],
        out_rows=[int(r) for r in out_rows],
        history=None,
    )


def _draft(engine: SpeculativeHooks, batch: _Batch, k: int, params: SamplingParams, gen: torch.Generator,
           step: int) -> _Drafted:
    """The draft proposes d_1..d_k, each drawn from its processed q_i (and q_{k+1} when the bonus hook needs it)."""
    dev, rows, vocab = engine.device, len(batch.out_rows), engine.vocab_size
    need_bonus_q = engine.needs_bonus_draft_probs
    drafted = _Drafted(
        draft_tokens=torch.zeros((rows, 0), dtype=torch.long, device=dev),
        draft_probs=torch.zeros((rows, 0, vocab), device=dev),
        bonus_draft_probs=None,
        ran=k > 0 or need_bonus_q,
        fed_width=0,
        fed_drafts=0,
    )
    if not drafted.ran:
        return drafted
    history = _start_history(engine, batch)
    ids, valid = left_padded(batch.draft_pending, engine.pad_id, dev)
    logits = _feed(engine, batch.draft, ids, valid, last_only=True)[:, -1]  # [rows, V]
    drafted.fed_width = ids.shape[1]
    draft_probs, draft_tokens = [], []
    look = None if batch.grammar is None else _LookAhead(batch.grammar)
    for i in range(k):
        q = engine.process_draft(logits, params, _masked(history, look, dev))  # [rows, V]
        d = sample_at_uniforms(q, engine.draw_uniforms((rows,), gen, step))  # [rows]
        draft_probs.append(q)
        draft_tokens.append(d)
        history = None if history is None else _with_token(history, d)
        if look is not None:
            look.push(d.tolist())
        if i < k - 1 or need_bonus_q:
            ones = torch.ones((rows, 1), dtype=torch.bool, device=dev)
            logits = _feed(engine, batch.draft, d[:, None], ones)[:, -1]
            drafted.fed_drafts += 1
    if need_bonus_q:
        drafted.bonus_draft_probs = engine.process_draft(logits, params, _masked(history, look, dev))
    if look is not None:
        look.undo()
    if k > 0:
        drafted.draft_probs = torch.stack(draft_probs, dim=1)
        drafted.draft_tokens = torch.stack(draft_tokens, dim=1)
    return drafted


def _verify(
    engine: SpeculativeHooks, batch: _Batch, drafted: _Drafted, k: int, params: SamplingParams, gen: torch.Generator,
    step: int,
) -> _Verified:
    """One target forward over ``[pending, d_1..d_k]``; accept a prefix of the drafts; draw the next token
    from the residual at the first rejection, or from the bonus law after k acceptances."""
    dev, rows = engine.device, len(batch.out_rows)
    target_in = torch.cat([batch.target_pending[:, None], drafted.draft_tokens], dim=1)  # [rows, k+1]
    target_valid = torch.ones_like(target_in, dtype=torch.bool)
    target_logits = _feed(engine, batch.target, target_in, target_valid)  # [rows, k+1, V]
    start = _start_history(engine, batch)
    block = None if start is None else engine.block_history(start, drafted.draft_tokens)  # [rows, k+1, V]
    if block is not None and batch.grammar is not None:  # each position's mask: the state over d_1..d_j
        drafts = drafted.draft_tokens.tolist()
        block = block.with_allowed(torch.stack([s.block_masks(d) for s, d in zip(batch.grammar, drafts,
                                                                                  strict=True)]).to(dev))
    target_probs = engine.process_target(target_logits, params, block)  # [rows, k+1, V]
    if k > 0:
        draft_probs = drafted.draft_probs  # [rows, k, V]
        effective_probs = engine.effective_target(target_probs[:, :k], draft_probs)  # [rows, k, V]
        accept = engine.accept_probs(effective_probs, draft_probs, drafted.draft_tokens)  # [rows, k]
        uniforms = engine.draw_uniforms((rows, k), gen, step)
        n_accepted = accept_prefix_lengths(accept.double(), uniforms)  # [rows]
        at = n_accepted.clamp(max=k - 1)  # the first rejected position (any, when all were accepted)
        ar = torch.arange(rows, device=dev)
        residual = engine.residual(effective_probs[ar, at], draft_probs[ar, at]).float()  # [rows, V]
        bonus = engine.bonus_probs(target_probs[:, k], drafted.bonus_draft_probs).float()  # [rows, V]
        next_law = torch.where((n_accepted < k)[:, None], residual, bonus)  # [rows, V]
    else:
        n_accepted = torch.zeros(rows, dtype=torch.long, device=dev)
        next_law = engine.bonus_probs(target_probs[:, 0], drafted.bonus_draft_probs).float()
    next_token = sample_at_uniforms(next_law, engine.draw_uniforms((rows,), gen, step))  # [rows]
    return _Verified(target_probs=target_probs, n_accepted=n_accepted, next_token=next_token)


def _roll_back(
    engine: SpeculativeHooks,
    batch: _Batch,
    drafted: _Drafted,
    n_accepted: torch.Tensor,  # [rows] int64
    k: int,
) -> None:
    """Keep pending + the accepted drafts visible in both caches; rejected slots are masked out."""
    dev, rows = engine.device, len(batch.out_rows)
    column = torch.arange(k + 1, device=dev)[None, :]
    engine.rollback(batch.target, column <= n_accepted[:, None])  # [rows, k+1]
    if drafted.ran:
        keep_pending = torch.ones((rows, drafted.fed_width), dtype=torch.bool, device=dev)
        keep_drafts = torch.arange(1, drafted.fed_drafts + 1, device=dev)[None, :] <= n_accepted[:, None]
        engine.rollback(batch.draft, torch.cat([keep_pending, keep_drafts], dim=1))


def _emit(
    engine: SpeculativeHooks,
    batch: _Batch,
    drafted: _Drafted,
    verified: _Verified,
    remaining: list[int],
    params: SamplingParams,
    out: _Outputs,
) -> list[int]:
    """Write each row's accepted drafts and next token, truncated at EOS / ``max_new_tokens`` / a stop string
    (hook ``stop_length``).

    Updates what each model has not seen yet; returns the rows that are not finished.
    """
    eos = None if params.ignore_eos else engine.eos_token_id
    draft_tokens, n_accepted = drafted.draft_tokens.tolist(), verified.n_accepted.tolist()
    next_token = verified.next_token.tolist()
    unfinished: list[int] = []
    for r in range(len(batch.out_rows)):
        n = n_accepted[r]
        emitted = draft_tokens[r][:n] + [next_token[r]]
        take = emitted[: remaining[r]]
        if eos is not None and eos in take:
            take = take[: take.index(eos) + 1]
        o, start = batch.out_rows[r], len(batch.generated[r])
        stopped = False
        if params.stop:
            n_stop = engine.stop_length(batch.generated[r] + take, start, params)
            if n_stop is not None:
                take, stopped = take[: n_stop - start], True
        out.tokens[o, start : start + len(take)] = take
        out.lengths[o] = start + len(take)
        if out.trace is not None:
            out.trace[o, start : start + len(take)] = verified.target_probs[r, : len(take)].float().cpu().numpy()
        batch.generated[r].extend(take)
        if batch.grammar is not None:
            engine.grammar_commit(batch.grammar[r], take, min(n, len(take)))
        if batch.history is not None:
            for t in take:
                batch.history.output_counts[r, t] += 1.0
        if drafted.ran:
            batch.draft_pending[r] = emitted[min(n, drafted.fed_drafts) :]
        else:
            batch.draft_pending[r] = batch.draft_pending[r] + emitted
        finished = stopped or len(batch.generated[r]) >= params.max_new_tokens or (eos is not None and take[-1] == eos)
        if not finished:
            unfinished.append(r)
    batch.target_pending = verified.next_token
    return unfinished


def _keep_rows(batch: _Batch, rows: list[int]) -> None:
    """Drop finished rows from both caches and the per-row state."""
    keep = torch.tensor(rows, dtype=torch.long, device=batch.target_pending.device)
    batch.target.select_rows(keep)
    batch.draft.select_rows(keep)
    batch.target_pending = batch.target_pending[keep]
    batch.draft_pending = [batch.draft_pending[r] for r in rows]
    batch.generated = [batch.generated[r] for r in rows]
    batch.out_rows = [batch.out_rows[r] for r in rows]
    if batch.history is not None:
        batch.history = batch.history.select(keep)
    if batch.grammar is not None:
        batch.grammar = [batch.grammar[r] for r in rows]


def _start_history(engine: SpeculativeHooks, batch: _Batch) -> TokenHistory | None:
    """The history a step starts from (hook ``step_history`` of the committed one), None without a penalty."""
    if batch.history is None:
        return None
    has_output = torch.tensor([len(g) > 0 for g in batch.generated], dtype=torch.bool, device=engine.device)
    return engine.step_history(batch.history, batch.target_pending, has_output)


def _with_token(history: TokenHistory, tokens: torch.Tensor) -> TokenHistory:  # tokens [rows]
    """``history`` [rows, V] with one more generated token per row."""
    ones = torch.ones((tokens.shape[0], 1), dtype=history.output_counts.dtype, device=tokens.device)
    return TokenHistory(history.prompt_mask, history.output_counts.scatter_add(-1, tokens[:, None], ones))


class _LookAhead:
    """The grammar states of a step's rows advanced over the draft's proposals so far, undone after drafting."""

    def __init__(self, states: list[RowGrammar]) -> None:
        self.states = states
        self.pushed = [0] * len(states)
        self.alive = [True] * len(states)  # False once a row's proposal left the grammar

    def masks(self) -> torch.Tensor:  # [rows, V] bool; all true past a proposal the grammar rejects
        return torch.stack([s.mask() if ok else torch.ones(s.vocab_size, dtype=torch.bool)
                            for s, ok in zip(self.states, self.alive, strict=True)])

    def push(self, tokens: list[int]) -> None:
        for r, (state, t) in enumerate(zip(self.states, tokens, strict=True)):
            if self.alive[r] and state.push(t):
                self.pushed[r] += 1
            else:
                self.alive[r] = False

    def undo(self) -> None:
        for state, n in zip(self.states, self.pushed, strict=True):
            state.rollback(n)


def _masked(history: TokenHistory | None, look: _LookAhead | None, device: str) -> TokenHistory | None:
    """``history`` with the look-ahead's grammar masks (unchanged without a grammar)."""
    if history is None or look is None:
        return history
    return history.with_allowed(look.masks().to(device))
