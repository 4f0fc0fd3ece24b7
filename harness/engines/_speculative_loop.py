"""The batched draft/verify loop of :class:`ReferenceSpeculativeEngine`.

Kept apart from the engine class so that the class shows only its hooks. The loop calls
every piece of arithmetic a mutant may change through the engine's hook methods.

Cache bookkeeping per row (both models see the prompt minus its last token at prefill):
- target: every step feeds ``[pending, d_1..d_k]`` (``pending`` = the last committed token,
  not yet in the cache) and keeps ``pending, d_1..d_n`` after ``n`` acceptances.
- draft: every step first feeds the committed tokens it has not seen (1 token, or 2 after a
  step whose k drafts were all accepted, left-padded with an invalid dummy slot), then
  d_1..d_{k-1} (and d_k when the bonus hook needs the draft's q there).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from speceq.engines._hf_utils import check_prompts, distinct_prompts, left_padded
from speceq.engines._kv import SlotCache
from speceq.engines._torch import batch_generator
from speceq.engines.base import PAD_OUT, SampleBatch, SampleRequest
from speceq.engines.reference import accept_prefix_lengths
from speceq.params import SamplingParams
from speceq.processing import sample_from_probs

if TYPE_CHECKING:
    from speceq.engines.reference import ReferenceSpeculativeEngine


@dataclass(slots=True)
class _Counters:
    drafted: int = 0
    accepted: int = 0
    verify_steps: int = 0
    accept_tests: int = 0  # drafts whose accept test decided something: min(n + 1, k) per row-step


@dataclass(slots=True)
class _Outputs:
    tokens: np.ndarray  # [rows, L] int64
    lengths: np.ndarray  # [rows] int64
    trace: np.ndarray | None  # [rows, L, vocab] float32


def run_speculative(engine: ReferenceSpeculativeEngine, request: SampleRequest) -> SampleBatch:
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


def _feed(
    engine: ReferenceSpeculativeEngine,
    slots: SlotCache,
    tokens: torch.Tensor,  # [rows, width]
    valid: torch.Tensor,  # [rows, width]
    *,
    last_only: bool = False,
) -> torch.Tensor:  # [rows, width, vocab] ([rows, 1, vocab] with last_only)
    return slots.forward(tokens, valid, engine.position_ids(slots, valid), last_only=last_only)


def _run_batch(
    engine: ReferenceSpeculativeEngine,
    prompts: list[tuple[int, ...]],
    params: SamplingParams,
    gen: torch.Generator,
    out_rows: np.ndarray,  # [batch] output row of each batch row
    out: _Outputs,
    counters: _Counters,
) -> None:
    dev = engine.device
    L = params.max_new_tokens
    eos = None if params.ignore_eos else engine.eos_token_id
    need_bonus_q = engine.needs_bonus_draft_probs
    target = SlotCache(engine.model, len(prompts), dev)
    draft = SlotCache(engine.draft, len(prompts), dev)
    heads, source = distinct_prompts([p[:-1] for p in prompts], dev)
    if any(heads):
        ids, valid = left_padded(heads, engine.pad_id, dev)
        target.prefill(ids, valid, source, engine.position_ids, last_only=True)
        draft.prefill(ids, valid, source, engine.position_ids, last_only=True)
    target_pending = torch.tensor([p[-1] for p in prompts], dtype=torch.long, device=dev)  # [rows]
    draft_pending: list[list[int]] = [[p[-1]] for p in prompts]  # committed tokens the draft has not seen
    generated: list[list[int]] = [[] for _ in prompts]
    active = [int(r) for r in out_rows]  # output row of each active batch row

    while active:
        rows = len(active)
        remaining = [L - len(g) for g in generated]
        k = min(engine.k, max(remaining) - 1)
        vocab = engine.vocab_size

        # ---- draft: k proposals from the processed q ---------------------------------
        draft_probs = torch.zeros((rows, 0, vocab), device=dev)  # [rows, k, V]
        drafts = torch.zeros((rows, 0), dtype=torch.long, device=dev)  # [rows, k]
        bonus_q: torch.Tensor | None = None  # [rows, V]
        fed_drafts = 0  # draft tokens fed to the draft this step
        draft_ran = k > 0 or need_bonus_q
        if draft_ran:
            ids, valid = left_padded(draft_pending, engine.pad_id, dev)
            logits = _feed(engine, draft, ids, valid, last_only=True)[:, -1]  # [rows, V]
            fed_width = ids.shape[1]
            qs, ds = [], []
            for i in range(k):
                q = engine.process_draft(logits, params)  # [rows, V]
                d = sample_from_probs(q, gen)  # [rows]
                qs.append(q)
                ds.append(d)
                if i < k - 1 or need_bonus_q:
                    ones = torch.ones((rows, 1), dtype=torch.bool, device=dev)
                    logits = _feed(engine, draft, d[:, None], ones)[:, -1]
                    fed_drafts += 1
            if need_bonus_q:
                bonus_q = engine.process_draft(logits, params)
            if k > 0:
                draft_probs = torch.stack(qs, dim=1)
                drafts = torch.stack(ds, dim=1)

        # ---- verify: one target forward over [pending, d_1..d_k] -----------------------
        t_in = torch.cat([target_pending[:, None], drafts], dim=1)  # [rows, k+1]
        t_valid = torch.ones_like(t_in, dtype=torch.bool)
        target_probs = engine.process_target(_feed(engine, target, t_in, t_valid), params)  # [rows, k+1, V]
        if k > 0:
            p_eff = engine.effective_target(target_probs[:, :k], draft_probs)  # [rows, k, V]
            accept = engine.accept_probs(p_eff, draft_probs, drafts)  # [rows, k]
            uniforms = torch.rand((rows, k), generator=gen, dtype=torch.float64, device=dev)
            n_acc = accept_prefix_lengths(accept.double(), uniforms)  # [rows]
            at = n_acc.clamp(max=k - 1)
            ar = torch.arange(rows, device=dev)
            resid = engine.residual(p_eff[ar, at], draft_probs[ar, at]).float()  # [rows, V]
            bonus = engine.bonus_probs(target_probs[:, k], bonus_q).float()  # [rows, V]
            final = torch.where((n_acc < k)[:, None], resid, bonus)
        else:
            n_acc = torch.zeros(rows, dtype=torch.long, device=dev)
            final = engine.bonus_probs(target_probs[:, 0], bonus_q).float()
        x = sample_from_probs(final, gen)  # [rows]
        counters.drafted += k * rows
        counters.accepted += int(n_acc.sum())
        counters.verify_steps += rows
        counters.accept_tests += int(torch.clamp(n_acc + 1, max=k).sum()) if k > 0 else 0

        # ---- rollback: keep pending + accepted drafts in both caches --------------------
        col = torch.arange(k + 1, device=dev)[None, :]
        engine.rollback(target, col <= n_acc[:, None])  # [rows, k+1]
        if draft_ran:
            keep_pending = torch.ones((rows, fed_width), dtype=torch.bool, device=dev)
            keep_drafts = torch.arange(1, fed_drafts + 1, device=dev)[None, :] <= n_acc[:, None]
            engine.rollback(draft, torch.cat([keep_pending, keep_drafts], dim=1))

        # ---- emit, truncate at EOS / max_new_tokens, drop finished rows ------------------
        drafts_l, n_l, x_l = drafts.tolist(), n_acc.tolist(), x.tolist()
        still: list[int] = []
        for r in range(rows):
            n = n_l[r]
            emitted = drafts_l[r][:n] + [x_l[r]]
            take = emitted[: remaining[r]]
            if eos is not None and eos in take:
                take = take[: take.index(eos) + 1]
            o, start = active[r], len(generated[r])
            out.tokens[o, start : start + len(take)] = take
            out.lengths[o] = start + len(take)
            if out.trace is not None:
                out.trace[o, start : start + len(take)] = target_probs[r, : len(take)].float().cpu().numpy()
            generated[r].extend(take)
            unseen = emitted[min(n, fed_drafts) :] if draft_ran else draft_pending[r] + emitted
            draft_pending[r] = unseen
            finished = len(generated[r]) >= L or (eos is not None and take[-1] == eos)
            if not finished:
                still.append(r)
        target_pending = x
        if len(still) < rows:
            if not still:
                break
            keep = torch.tensor(still, dtype=torch.long, device=dev)
            target.select_rows(keep)
            draft.select_rows(keep)
            target_pending = target_pending[keep]
            draft_pending = [draft_pending[r] for r in still]
            generated = [generated[r] for r in still]
            active = [active[r] for r in still]
