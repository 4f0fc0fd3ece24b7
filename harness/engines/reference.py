"""The reference speculative engine: Leviathan/Chen modified rejection sampling, batched.

Algorithm (Leviathan et al., arXiv:2211.17192, Alg. 1; Chen et al., arXiv:2302.01318), per
row and step, with ``target_probs`` = p and ``draft_probs`` = q after the SAME logit
processing (:func:`speceq.core.processing.process_logits`; greedy T=0 runs through the same
code with one-hot p and q):

1. the draft proposes ``d_1..d_k``, each drawn from its processed q_i;
2. the target scores prefix + d_1..d_k in ONE forward pass, giving p_1..p_{k+1};
3. d_i is accepted with probability min(1, p_i(d_i) / q_i(d_i)), in order, until the first
   rejection;
4. at the first rejection i, one token is drawn from norm(max(0, p_i - q_i)); when all k
   are accepted, a bonus token is drawn from p_{k+1}.

Every emitted token is then exactly distributed as p given its prefix. Rows of one batch
accept different numbers of drafts (ragged acceptance): each row keeps its own positions,
rejected slots are masked out of both KV caches (and trailing unused slots cropped), and
rows finish at EOS or ``max_new_tokens`` at different steps. The accept/reject arithmetic
is in :mod:`speceq.engines.rejection` and the batched loop in
:mod:`speceq.engines._speculative_loop`; the engine calls the arithmetic through hook
methods so that a deliberately buggy variant (a mutant) is a subclass overriding ONE hook.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from speceq.core.params import SamplingParams
from speceq.core.processing import TokenHistory, process_logits
from speceq.core.stops import first_stop
from speceq.engines._kv import SlotCache
from speceq.engines._speculative_loop import run_speculative
from speceq.engines.base import ALL_SAMPLING_FIELDS, SampleBatch, SampleRequest
from speceq.engines.rejection import acceptance_ratios, gather_token_probs, residual_probs
from speceq.errors import ConfigError
from speceq.models.grammar import RowGrammar
from speceq.models.hf_utils import describe_model, load_causal_lm, model_eos_id, model_pad_id, model_vocab_size
from speceq.models.text_decoding import row_decoder
from speceq.models.torch_utils import configure_threads


class ReferenceSpeculativeEngine:
    """Reference speculative sampler: a draft proposes ``k`` tokens, the target verifies.

    Parameters
    ----------
    target, draft : None (the bundled target / draft), a local model folder, or a loaded
        causal LM; both must share the vocabulary.
    k : draft tokens per step (fewer near ``max_new_tokens``: a step never drafts past the
        longest remaining row).
    device, dtype, name, eos_token_id, threads : as for :class:`BaselineEngine`.
    trace : when true, ``SampleBatch.info["trace_probs"]`` holds the processed target law p
        at every emitted position, float32 ``[rows, max_new_tokens, vocab]`` (for tests).

    Counts in the SampleBatch: ``drafted_tokens`` (k per active row and step),
    ``accepted_tokens`` (accepted drafts, before truncation at EOS / ``max_new_tokens``),
    ``verify_steps`` (target verifications summed over rows: one batch forward of 8 rows
    counts 8); ``info["accept_tests"]`` counts the accept tests that decided something
    (min(n + 1, k) per row and step), so accepted / accept_tests estimates the per-token
    acceptance probability alpha of Leviathan et al.

    Hooks (override ONE in a subclass to build a mutant; shapes: ``rows`` active rows,
    ``k`` drafts this step, ``V`` vocabulary):

    - ``process_target(logits [rows, k+1, V], params, history) -> [rows, k+1, V]``: p from target
      logits; ``history`` (None without a penalty) is ``block_history``'s, per block position.
    - ``process_draft(logits [rows, V], params, history) -> [rows, V]``: q from draft logits, with
      the row's history up to the proposal (None without a penalty).
    - ``step_history(history [rows, V], last_token [rows], has_output [rows]) -> [rows, V]``: the
      penalty history a step starts from, given the committed one (itself here); ``last_token``
      is each row's last committed token, ``has_output`` whether the row generated any yet.
    - ``block_history(history [rows, V], draft_tokens [rows, k]) -> [rows, k+1, V]``: the histories
      the verifier uses at each block position (position j: the drafts before it appended here).
    - ``effective_target(target_probs [rows, k, V], draft_probs [rows, k, V]) -> [rows, k, V]``:
      the law the verifier treats as the target at the draft positions (identity here).
    - ``accept_probs(target_probs [rows, k, V], draft_probs [rows, k, V], draft_tokens [rows, k])
      -> [rows, k]``: probability of accepting each draft token (min(1, p/q) here).
    - ``residual(target_probs [rows, V], draft_probs [rows, V]) -> [rows, V]``: the law of the
      token drawn at the first rejection (norm(max(0, p - q)) here). The engine samples from
      what it returns with :func:`sample_from_probs` (inverse CDF on the normalised cumsum).
    - ``bonus_probs(target_probs [rows, V], draft_probs [rows, V] | None) -> [rows, V]``: the law of
      the bonus token after k acceptances (p_{k+1} here). ``draft_probs`` is the draft's q at
      the bonus position, computed (one extra draft forward) only when a subclass overrides
      this hook; otherwise None.
    - ``position_ids(slots, valid [rows, w]) -> [rows, w]``: position ids of new slots of either
      model (each row's own count here, so left padding and rejected slots are skipped).
    - ``rollback(slots, keep [rows, w])``: after verification, keep only accepted slots
      visible in a model's KV cache (``slots.keep_last(keep)`` here).
    - ``stop_length(row, committed, params) -> int | None``: with ``params.stop``, the length at
      which a stop string ends ``row`` (its committed tokens plus this step's ``row[committed:]``):
      the first prefix longer than ``committed`` whose decoded text holds a stop string
      (:func:`speceq.core.stops.first_stop`); None when none does.
    - ``grammar_commit(state, emitted, accepted)``: with ``params.structured_outputs``, advance the
      row's committed grammar state over the tokens this step emits (``emitted``, whose first
      ``accepted`` are accepted drafts): all of them here.

    - ``draw_uniforms(shape, gen, step) -> float64 [shape]``: the uniforms of one draw of the
      batch's verify ``step`` (0-based), ``shape[0]`` rows (independent draws from the batch's
      generator here; every token is drawn at its uniform by inverse CDF).

    Applies every request field of :class:`SamplingParams` (min_p, the penalties, logit_bias, stop
    strings, structured_outputs) in both processing orders, with each row's own history.

    ``single_step_law(p, q)`` gives the exact law of the first emitted token under these
    hooks, so a mutant's single-step TV shift can be computed analytically.
    """

    sampling_fields = ALL_SAMPLING_FIELDS

    def __init__(
        self,
        target: str | Path | Any | None = None,
        draft: str | Path | Any | None = None,
        *,
        k: int = 4,
        device: str = "cpu",
        dtype: str = "float32",
        name: str = "reference",
        eos_token_id: int | None = None,
        threads: int | None = None,
        trace: bool = False,
    ) -> None:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"expected an integer >= 1, got {k!r}", where=f"{name}.k")
        self.threads = configure_threads(threads)
        self.model = load_causal_lm(target, role="target", device=device, dtype=dtype)
        self.name = name
        self.device = device
        self.dtype = dtype
        self.vocab_size = model_vocab_size(self.model)
        self.eos_token_id = model_eos_id(self.model, eos_token_id)
        self.pad_id = model_pad_id(self.model)
        self.trace = trace
        self.draft = load_causal_lm(draft, role="draft", device=device, dtype=dtype)
        if model_vocab_size(self.draft) != self.vocab_size:
            raise ConfigError(
                f"draft vocabulary {model_vocab_size(self.draft)} differs from the target's {self.vocab_size}",
                where=f"{name}.draft",
            )
        self.k = k

    @property
    def needs_bonus_draft_probs(self) -> bool:
        """True when a subclass's ``bonus_probs`` wants the draft's q at the bonus position."""
        return type(self).bonus_probs is not ReferenceSpeculativeEngine.bonus_probs

    def describe(self) -> dict[str, Any]:
        return {
            "engine": "reference-speculative",
            "name": self.name,
            "class": type(self).__qualname__,
            "k": self.k,
            "model": describe_model(self.model),
            "draft": describe_model(self.draft),
            "eos_token_id": self.eos_token_id,
            "threads": self.threads,
        }

    # ---- hooks ------------------------------------------------------------------------
    def process_target(
        self, logits: torch.Tensor, params: SamplingParams, history: TokenHistory | None = None
    ) -> torch.Tensor:
        return process_logits(logits, params, eos_token_id=self.eos_token_id, history=history)

    def process_draft(
        self, logits: torch.Tensor, params: SamplingParams, history: TokenHistory | None = None
    ) -> torch.Tensor:
        return process_logits(logits, params, eos_token_id=self.eos_token_id, history=history)

    def step_history(self, history: TokenHistory, last_token: torch.Tensor, has_output: torch.Tensor) -> TokenHistory:
        return history

    def block_history(self, history: TokenHistory, draft_tokens: torch.Tensor) -> TokenHistory:
        return history.extended(draft_tokens)

    def effective_target(self, target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
        return target_probs

    def accept_probs(
        self, target_probs: torch.Tensor, draft_probs: torch.Tensor, draft_tokens: torch.Tensor
    ) -> torch.Tensor:
        return acceptance_ratios(
            gather_token_probs(target_probs, draft_tokens), gather_token_probs(draft_probs, draft_tokens)
        )

    def residual(self, target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
        return residual_probs(target_probs, draft_probs)

    def bonus_probs(self, target_probs: torch.Tensor, draft_probs: torch.Tensor | None) -> torch.Tensor:
        return target_probs

    def position_ids(self, slots: SlotCache, valid: torch.Tensor) -> torch.Tensor:
        return slots.positions_for(valid)

    def rollback(self, slots: SlotCache, keep: torch.Tensor) -> None:
        slots.keep_last(keep)

    def stop_length(self, row: list[int], committed: int, params: SamplingParams) -> int | None:
        match = first_stop(row, row_decoder(params.tokenizer or ""), params.stop, start=committed)
        return None if match is None else match.length

    def draw_uniforms(self, shape: tuple[int, ...], gen: torch.Generator, step: int) -> torch.Tensor:
        return torch.rand(shape, generator=gen, dtype=torch.float64, device=self.device)

    def grammar_commit(self, state: RowGrammar, emitted: list[int], accepted: int) -> None:
        state.advance(emitted)

    # ---- analysis ---------------------------------------------------------------------
    def single_step_law(
        self,
        target_probs: torch.Tensor,  # [V]: processed p at the first position
        draft_probs: torch.Tensor,  # [V]: processed q at the first position
    ) -> torch.Tensor:  # [V] float64
        """Exact law of the first emitted token given (p, q) of the first position, k >= 1.

        P(x) = q(x) a(x) + (sum_y q(y) (1 - a(y))) r(x), with a the hook ``accept_probs`` for
        draft token x and r the hook ``residual`` (after ``effective_target``).
        """
        V = target_probs.shape[-1]
        p = target_probs.double()
        q = draft_probs.double()
        p_eff = self.effective_target(p[None, None, :], q[None, None, :])[0, 0]  # [V]
        every = torch.arange(V)[:, None]  # [V, 1]: each possible draft token
        accept = self.accept_probs(
            p_eff.expand(V, 1, V), q.expand(V, 1, V), every
        )[:, 0].double()  # [V]
        accept = torch.where(q > 0, accept, torch.zeros_like(accept))  # tokens q never drafts play no part
        reject_mass = (q * (1.0 - accept)).sum()
        residual = self.residual(p_eff[None], q[None])[0].double()
        residual = residual / residual.sum() if float(residual.sum()) > 0 else residual
        return q * accept + reject_mass * residual

    # ---- sampling ---------------------------------------------------------------------
    def sample(self, request: SampleRequest) -> SampleBatch:
        """Draw ``request.n`` continuations of every prompt by speculative sampling."""
        return run_speculative(self, request)
