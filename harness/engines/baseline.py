"""The baseline engine: plain batched ancestral sampling of the target with a KV cache.

Rows follow :meth:`SampleRequest.rows` and are cut into batches of ``request.batch_size``.
A batch is left-padded, with an attention mask and explicit per-row position ids, so each
row is computed exactly as if it were alone (up to float rounding); each distinct prompt of
a batch is computed once and its KV cache copied to the rows that continue it. Every step applies
:func:`speceq.core.processing.process_logits` and draws with
:func:`speceq.core.processing.sample_from_probs` from one ``torch.Generator`` per batch,
seeded from ``(request.seed, batch index)``. With a penalty, each row's own history (its
prompt and the tokens it generated so far) goes into the processing; with ``structured_outputs``, each row's
own grammar state (:mod:`speceq.models.grammar`) masks every step and consumes the row's token. A row ends at EOS (unless ``ignore_eos``), at
the token that completes one of its ``stop`` strings (:mod:`speceq.core.stops`), or after ``max_new_tokens``;
finished rows leave the batch.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from speceq.core.params import SamplingParams
from speceq.core.processing import TokenHistory, process_logits, sample_from_probs, token_history
from speceq.core.stops import first_stop
from speceq.engines._batching import check_prompts, distinct_prompts, left_padded
from speceq.engines._kv import SlotCache
from speceq.engines.base import ALL_SAMPLING_FIELDS, PAD_OUT, SampleBatch, SampleRequest
from speceq.models.grammar import Grammar, row_masks
from speceq.models.hf_utils import describe_model, load_causal_lm, model_eos_source, model_pad_id, model_vocab_size
from speceq.models.text_decoding import row_decoder
from speceq.models.torch_utils import batch_generator, configure_threads


class BaselineEngine:
    """Plain sampling of the target: the reference law every candidate is compared with.

    Parameters
    ----------
    target : None (the bundled target), a local model folder, or a loaded causal LM.
    device, dtype : where and in which precision the model runs.
    name : the engine's name in results.
    eos_token_id : overrides the model config's EOS id.
    threads : torch intra-op threads (see :func:`configure_threads`; default 1).
    trace : when true, ``SampleBatch.info["trace_probs"]`` holds the processed distribution
        each token was drawn from, float32 ``[rows, max_new_tokens, vocab]`` (zeros after a
        row's end). For tests; costs memory.

    Applies every request field of :class:`SamplingParams` in both processing orders.
    """

    sampling_fields = ALL_SAMPLING_FIELDS

    def __init__(
        self,
        target: str | Path | Any | None = None,
        *,
        device: str = "cpu",
        dtype: str = "float32",
        name: str = "baseline",
        eos_token_id: int | None = None,
        threads: int | None = None,
        trace: bool = False,
    ) -> None:
        self.threads = configure_threads(threads)
        self.model = load_causal_lm(target, role="target", device=device, dtype=dtype)
        self.name = name
        self.device = device
        self.dtype = dtype
        # vocabulary and EOS from the model: logit count; generation_config > config > tokenizer
        self.vocab_size = model_vocab_size(self.model)
        self.vocab_source = "model"
        self.eos_token_id, self.eos_source = model_eos_source(self.model, eos_token_id)
        self.pad_id = model_pad_id(self.model)
        self.trace = trace

    def describe(self) -> dict[str, Any]:
        return {
            "engine": "baseline",
            "name": self.name,
            "model": describe_model(self.model),
            "eos_token_id": self.eos_token_id,
            "eos_source": self.eos_source,
            "threads": self.threads,
        }

    def process(
        self, logits: torch.Tensor, params: SamplingParams, history: TokenHistory | None = None
    ) -> torch.Tensor:
        """Processed next-token probabilities ``[rows, vocab]`` from logits ``[rows, vocab]`` and each row's history."""
        return process_logits(logits, params, eos_token_id=self.eos_token_id, history=history)

    def sample(self, request: SampleRequest) -> SampleBatch:
        """Draw ``request.n`` continuations of every prompt."""
        check_prompts(request.prompts, self.vocab_size, self.name)
        start = time.perf_counter()
        layout = request.rows()
        L = request.params.max_new_tokens
        tokens = np.full((len(layout), L), PAD_OUT, dtype=np.int64)
        lengths = np.zeros(len(layout), dtype=np.int64)
        trace = np.zeros((len(layout), L, self.vocab_size), dtype=np.float32) if self.trace else None
        with torch.inference_mode():
            for b, lo in enumerate(range(0, len(layout), request.batch_size)):
                rows = np.arange(lo, min(lo + request.batch_size, len(layout)))
                prompts = [request.prompts[int(layout[r])] for r in rows]
                gen = batch_generator(request.seed, b, self.device)
                self._sample_batch(prompts, request.params, gen, rows, tokens, lengths, trace)
        info: dict[str, Any] = {}
        if trace is not None:
            info["trace_probs"] = trace
        return SampleBatch(
            tokens=tokens,
            lengths=lengths,
            prompt_index=layout.astype(np.int64),
            wall_time_s=time.perf_counter() - start,
            info=info,
        )

    def _sample_batch(
        self,
        prompts: list[tuple[int, ...]],
        params: SamplingParams,
        gen: torch.Generator,
        out_rows: np.ndarray,  # [batch] row index of each batch row in the output
        tokens: np.ndarray,  # [rows, L] output, filled in place
        lengths: np.ndarray,  # [rows] output, filled in place
        trace: np.ndarray | None,  # [rows, L, vocab] output, filled in place
    ) -> None:
        L = params.max_new_tokens
        slots = SlotCache(self.model, len(prompts), self.device)
        distinct, source = distinct_prompts(prompts, self.device)
        ids, valid = left_padded(distinct, self.pad_id, self.device)
        logits = slots.prefill(ids, valid, source, last_only=True)[:, -1]  # [active, vocab]
        active = torch.as_tensor(out_rows, dtype=torch.long)  # output row of each active batch row
        history = (token_history(prompts, [[] for _ in prompts], self.vocab_size, self.device)
                   if params.uses_history else None)  # [active, vocab]: each row's prompt and tokens so far
        grammar = (None if params.structured_outputs is None
                   else Grammar(params, self.vocab_size, self.eos_token_id))
        states = None if grammar is None else [grammar.row() for _ in prompts]  # each active row's grammar state
        for t in range(L):
            if states is not None and history is not None:
                history = history.with_allowed(row_masks(states).to(self.device))
            # a subclass that overrides process(logits, params) keeps working for cases without a penalty
            probs = (self.process(logits, params) if history is None
                     else self.process(logits, params, history))  # [active, vocab]
            tok = sample_from_probs(probs, gen)  # [active]
            if states is not None:
                for state, x in zip(states, tok.tolist(), strict=True):
                    state.advance([x])
            if history is not None:
                history = TokenHistory(history.prompt_mask,
                                       history.output_counts.scatter_add(-1, tok[:, None], torch.ones_like(
                                           tok[:, None], dtype=history.output_counts.dtype)))
            rows_np = active.numpy()
            tokens[rows_np, t] = tok.cpu().numpy()
            lengths[rows_np] = t + 1
            if trace is not None:
                trace[rows_np, t] = probs.float().cpu().numpy()
            if t == L - 1:
                break
            going = torch.ones_like(tok, dtype=torch.bool)
            if self.eos_token_id is not None and not params.ignore_eos:
                going &= tok != self.eos_token_id
            if params.stop:  # a row whose text now holds a stop string ends at this token
                decode = row_decoder(params.tokenizer)
                stopped = [first_stop(tokens[o, : t + 1], decode, params.stop, start=t) is not None for o in rows_np]
                going &= ~torch.tensor(stopped, dtype=torch.bool, device=going.device)
            if not bool(going.all()):
                if not bool(going.any()):
                    break
                keep = torch.nonzero(going).squeeze(1)
                slots.select_rows(keep)
                active, tok = active[keep.cpu()], tok[keep]
                history = None if history is None else history.select(keep)
                states = None if states is None else [states[i] for i in keep.tolist()]
            ones = torch.ones((len(tok), 1), dtype=torch.bool, device=self.device)
            logits = slots.forward(tok[:, None], ones)[:, -1]
