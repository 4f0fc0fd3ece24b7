"""The oracle: teacher-forced scoring of samples with the target model.

For every generated token of a sample set, the oracle computes the processed next-token
law p_t of the target at that token's prefix, with exactly the logit processing the engines
use (:func:`speceq.core.processing.process_logits`), and reduces it to the per-token numbers of
:class:`speceq.stats.scores.TokenScores`. With a penalty, each token's law is computed from its
own row's history (the row's prompt and the tokens that row generated before it); with
``structured_outputs``, each token's law is masked by the grammar state after its own row's tokens
before it (:mod:`speceq.models.grammar`): a token the grammar does not allow there has probability 0,
and after it the row's later tokens are scored unmasked. Rows are scored in batches (one forward pass per
batch of rows, right-padded, rows sorted by length to limit padding).

Memory: a forward pass produces at most :data:`LOGITS_BUDGET` logits, and its tokens' fields
are reduced in slices of :data:`FIELDS_BUDGET` entries, so the peak grows with the batch
and the vocabulary (a few times the logits budget), never with the number of samples.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from speceq.core.params import SamplingParams
from speceq.core.processing import TokenHistory, bias_and_penalties, grammar_cut, process_logits, token_history
from speceq.engines.base import SampleBatch, checked_prefixes, checked_rows
from speceq.errors import ConfigError
from speceq.models.fast_forward import FastLlama, fast_model
from speceq.models.grammar import Grammar, row_masks
from speceq.models.hf_utils import describe_model, load_causal_lm, model_eos_id, model_pad_id, model_vocab_size
from speceq.models.torch_utils import configure_threads
from speceq.stats.scores import DRAFT_RATIO_CAP, TokenScores
from speceq.stats.support_margin import exclusion_margins

#: Floor of the draft probability inside log q (TokenScores.draft_llr).
DRAFT_PROB_FLOOR = 1e-30
#: Most logits (floats) one forward pass may produce: 2**25 floats = 128 MiB.
LOGITS_BUDGET = 2**25
#: Most entries of the ``[tokens, V]`` laws reduced to per-token fields at once: 2**20 entries
#: (8 MiB per float64 copy). The fields are row-wise, so cutting a forward pass's tokens into
#: slices of ``FIELDS_BUDGET // V`` rows gives the same numbers with a fraction of the memory.
FIELDS_BUDGET = 2**20
#: Default of ``eos_token_id``: the target model's own EOS id.
MODEL_EOS: Any = object()
_FIELDS = ("prob", "cdf_before", "argmax_prob", "is_argmax", "logp", "logp_mean", "logp_var", "logp_m4",
           "raw_top2_margin", "exclusion_margin")
_DRAFT_FIELDS = ("draft_llr", "draft_llr_mean", "draft_llr_var", "draft_tv", "draft_ratio", "draft_ratio_mean",
                 "draft_ratio_var", "draft_ratio_m4")


class TargetOracle:
    """Exact processed next-token laws of the target (and optionally a draft) for any prefix.

    Parameters
    ----------
    target, draft : None (bundled target; no draft), a local model folder or a loaded model.
        With a draft, :meth:`score` also fills the ``draft_llr*`` fields.
    device, dtype : where and in which precision the models run.
    threads : torch intra-op threads (default 1, see ``configure_threads``).
    eos_token_id : the EOS id that ``ignore_eos`` masks (None: no EOS); default: the target
        model's (generation config, config, then tokenizer), never a fixed id.
    share_prefix : in :meth:`score`, run each distinct prompt once and only the generated
        tokens of each row against its cached keys and values (models with a fast forward
        only; others score whole rows). Several times less arithmetic, but the logits then
        differ from the whole-row forward in the last float bits (log-probabilities agree to
        1e-5, tested), so p-values may differ in their last digits. Default off: whole rows,
        bit-identical to transformers' forward.
    """

    def __init__(
        self,
        target: str | Path | Any | None = None,
        *,
        draft: str | Path | Any | None = None,
        device: str = "cpu",
        dtype: str = "float32",
        threads: int | None = None,
        eos_token_id: Any = MODEL_EOS,
        share_prefix: bool = False,
    ) -> None:
        self.share_prefix = bool(share_prefix)
        self.dtype = str(dtype).removeprefix("torch.")
        self.threads = configure_threads(threads)
        self.model = load_causal_lm(target, role="target", device=device, dtype=dtype)
        self.eos_token_id = model_eos_id(self.model, None) if eos_token_id is MODEL_EOS else eos_token_id
        self.draft = None if draft is None else load_causal_lm(draft, role="draft", device=device, dtype=dtype)
        self.device = device
        self.vocab_size = model_vocab_size(self.model)
        self.pad_id = model_pad_id(self.model)
        if self.draft is not None and model_vocab_size(self.draft) != self.vocab_size:
            raise ConfigError(
                f"draft vocabulary {model_vocab_size(self.draft)} differs from the target's {self.vocab_size}",
                where="oracle.draft",
            )

    @property
    def has_draft(self) -> bool:
        """A draft model was given: :meth:`score` fills the draft fields."""
        return self.draft is not None

    def knows_full_law(self, params: SamplingParams) -> bool:
        """Always: the target's logits give the whole processed law."""
        return True

    def describe(self) -> dict[str, Any]:
        return {
            "model": describe_model(self.model),
            "draft": None if self.draft is None else describe_model(self.draft),
            "eos_token_id": self.eos_token_id,
            "threads": self.threads,
            "share_prefix": self.share_prefix,
        }

    # ---- low level ------------------------------------------------------------------------
    def _iter_logits(
        self, models: list[Any], seqs: list[list[int]], wanted: list[np.ndarray], max_batch_rows: int
    ) -> Iterator[tuple[np.ndarray, list[torch.Tensor]]]:
        """Per batch of rows: (flat indices [n], logits [n, vocab] float32 of each model).

        Flat index j of sequence i's position ``wanted[i][m]`` is ``offset(i) + m``, offsets in
        the order of ``seqs``: the next-token logits after ``seqs[i][:wanted[i][m] + 1]``.
        One forward pass per model and batch, right-padded, rows sorted by length.
        """
        order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
        offsets = np.concatenate([[0], np.cumsum([len(w) for w in wanted])]).astype(np.int64)
        budget = max(1, LOGITS_BUDGET // self.vocab_size)
        with torch.inference_mode():
            for chunk in forward_batches(order, [len(s) for s in seqs], max_batch_rows, budget):
                width = max(len(seqs[i]) for i in chunk)
                ids = torch.full((len(chunk), width), self.pad_id, dtype=torch.long)
                mask = torch.zeros((len(chunk), width), dtype=torch.long)
                for j, i in enumerate(chunk):
                    ids[j, : len(seqs[i])] = torch.as_tensor(seqs[i], dtype=torch.long)
                    mask[j, : len(seqs[i])] = 1
                rows = torch.as_tensor(np.concatenate([np.full(len(wanted[i]), j) for j, i in enumerate(chunk)]))
                cols = torch.as_tensor(np.concatenate([wanted[i] for i in chunk]))
                dest = np.concatenate([np.arange(offsets[i], offsets[i + 1]) for i in chunk])
                picked = []
                for model in models:
                    logits = _forward(model, ids.to(self.device), mask.to(self.device))
                    picked.append(logits[rows, cols].float().cpu())
                    del logits  # the padded [rows, width, V] logits: free before the next model's
                yield dest, picked

    def _check(self, seqs: Sequence[Sequence[int]], what: str) -> list[list[int]]:
        return checked_prefixes(seqs, self.vocab_size, what=what, scorer="the target")

    def _last_logits(self, prefixes: Sequence[Sequence[int]], max_batch_rows: int) -> torch.Tensor:
        """Raw next-token logits ``[rows, vocab]`` after each prefix."""
        seqs = self._check(prefixes, "prefix")
        out = torch.empty((len(seqs), self.vocab_size), dtype=torch.float32)
        last = [np.array([len(s) - 1]) for s in seqs]
        for dest, (logits,) in self._iter_logits([self.model], seqs, last, max_batch_rows):
            out[torch.as_tensor(dest)] = logits
        return out

    # ---- public ---------------------------------------------------------------------------
    def next_token_probs(
        self,
        prefixes: Sequence[Sequence[int]],
        params: SamplingParams,
        *,
        eos_token_id: Any = MODEL_EOS,
        max_batch_rows: int = 256,
    ) -> np.ndarray:  # [rows, vocab] float32
        """Processed law of the target's first generated token after each prefix (EOS default: the oracle's).

        Each prefix is a prompt: with a penalty, its tokens count as prompt tokens and none as generated.
        """
        eos_token_id = self.eos_token_id if eos_token_id is MODEL_EOS else eos_token_id
        history = (token_history(prefixes, [[] for _ in prefixes], self.vocab_size) if params.uses_history else None)
        if history is not None and params.structured_outputs is not None:
            grammar = Grammar(params, self.vocab_size, eos_token_id)
            history = history.with_allowed(row_masks([grammar.row() for _ in prefixes]))
        return process_logits(self._last_logits(prefixes, max_batch_rows), params, eos_token_id=eos_token_id,
                              history=history).numpy()

    def raw_top2_margin(self, prefixes: Sequence[Sequence[int]], *, max_batch_rows: int = 256) -> np.ndarray:
        """Raw (T=1, unprocessed) log-prob of the top-1 minus the top-2 next token, nats, per prefix."""
        logits = self._last_logits(prefixes, max_batch_rows)
        out = np.empty(logits.shape[0], dtype=np.float64)
        for lo, hi in _row_slices(logits.shape[0], self.vocab_size):
            out[lo:hi] = _top2_margin(logits[lo:hi]).numpy()
        return out

    def score(
        self,
        prompts: Sequence[Sequence[int]],
        batch: SampleBatch,
        params: SamplingParams,
        *,
        eos_token_id: Any = MODEL_EOS,
        max_batch_rows: int = 256,
    ) -> TokenScores:
        """Score every generated token of ``batch`` (rows continue ``prompts[batch.prompt_index]``)."""
        eos_token_id = self.eos_token_id if eos_token_id is MODEL_EOS else eos_token_id
        prompt_lists = self._check(prompts, "prompt")
        lengths = np.asarray(batch.lengths, dtype=np.int64)
        seqs: list[list[int]] = []
        wanted: list[np.ndarray] = []
        for prompt, gen in checked_rows(prompt_lists, batch, self.vocab_size):
            P = len(prompt)
            seqs.append(prompt + gen[:-1])  # the last token's logits are never needed
            wanted.append(np.arange(P - 1, P - 1 + len(gen)))
        flat = [np.asarray(batch.tokens[r, : lengths[r]], dtype=np.int64) for r in range(batch.rows)]
        tokens = np.concatenate([np.zeros(0, np.int64), *flat])  # [N]
        grammar = None if params.structured_outputs is None else Grammar(params, self.vocab_size, eos_token_id)
        histories = _Histories(prompt_lists, batch, self.vocab_size, grammar) if params.uses_history else None
        models = [self.model] if self.draft is None else [self.model, self.draft]
        fields: dict[str, np.ndarray] = {}
        fasts = [fast_model(m) for m in models]
        if self.share_prefix and all(f is not None for f in fasts):
            index = np.asarray(batch.prompt_index, dtype=np.int64)
            gens = [batch.row_tokens(r) for r in range(batch.rows)]
            chunks = _iter_shared_prefix_logits(fasts, prompt_lists, index, gens, max_batch_rows, self.pad_id,
                                                self.vocab_size, self.device)
        else:
            chunks = self._iter_logits(models, seqs, wanted, max_batch_rows)
        for dest, logits in chunks:
            for lo, hi in _row_slices(len(dest), self.vocab_size):
                history = None if histories is None else histories.at(dest[lo:hi])
                part = _slice_fields([x[lo:hi] for x in logits], torch.as_tensor(tokens[dest[lo:hi]]), params,
                                     eos_token_id, history)
                for name, values in part.items():
                    if name not in fields:
                        fields[name] = np.empty(len(tokens), dtype=values.dtype)
                    fields[name][dest[lo:hi]] = values
            del logits
        if not fields:  # no generated token at all
            names = _FIELDS + (_DRAFT_FIELDS if self.draft is not None else ())
            fields = {f: np.zeros(0, dtype=bool if f == "is_argmax" else np.float64) for f in names}
        return TokenScores(
            row=np.repeat(np.arange(batch.rows, dtype=np.int64), lengths),
            position=np.concatenate([np.zeros(0, np.int64), *(np.arange(n, dtype=np.int64) for n in lengths)]),
            token=tokens,
            **fields,
        )


class _Histories:
    """The penalty history (and grammar mask) of every generated token of a batch, by flat token index (rows in order)."""

    def __init__(self, prompts: list[list[int]], batch: SampleBatch, vocab_size: int,
                 grammar: Grammar | None = None) -> None:
        self.vocab_size = vocab_size
        self.prompts = [prompts[int(i)] for i in batch.prompt_index]
        self.gens = [batch.row_tokens(r) for r in range(batch.rows)]
        lengths = np.asarray(batch.lengths, dtype=np.int64)
        self.row = np.repeat(np.arange(batch.rows, dtype=np.int64), lengths)
        self.position = np.concatenate([np.zeros(0, np.int64), *(np.arange(n, dtype=np.int64) for n in lengths)])
        # the grammar mask before every token, bit-packed [N, ceil(V / 8)]: each row walked through its own tokens
        self.allowed = None if grammar is None else np.packbits(
            np.concatenate([np.zeros((0, vocab_size), dtype=bool), *(_row_grammar_masks(grammar, g) for g in self.gens)]),
            axis=1)

    def at(self, flat: np.ndarray) -> TokenHistory:
        """``[len(flat), V]``: token j's row prompt, and the tokens its row generated before it."""
        rows, pos = self.row[flat], self.position[flat]
        history = token_history([self.prompts[r] for r in rows],
                                [self.gens[r][:m] for r, m in zip(rows, pos, strict=True)], self.vocab_size)
        if self.allowed is None:
            return history
        bits = np.unpackbits(self.allowed[flat], axis=1, count=self.vocab_size).astype(bool)
        return history.with_allowed(torch.from_numpy(bits))


def _row_grammar_masks(grammar: Grammar, tokens: Sequence[int]) -> np.ndarray:  # [len(tokens), V] bool
    """The grammar mask before each of a row's tokens; all true after the first token the grammar rejects."""
    state = grammar.row()
    out = np.ones((len(tokens), grammar.vocab_size), dtype=bool)
    for m, t in enumerate(tokens):
        out[m] = state.mask().numpy()
        if not state.push(int(t)):
            break
    return out


def _iter_shared_prefix_logits(
    fasts: list[FastLlama],
    prompts: list[list[int]],
    prompt_index: np.ndarray,  # [rows]
    gens: list[list[int]],  # generated tokens of each row
    max_batch_rows: int,
    pad_id: int,
    vocab_size: int,
    device: str,
) -> Iterator[tuple[np.ndarray, list[torch.Tensor]]]:
    """Like ``TargetOracle._iter_logits`` for :meth:`TargetOracle.score`, one prompt prefill per prompt.

    Row r needs the logits after ``prompt + gen[:m]`` for m < len(gen): the prompt minus its
    last token is run once per distinct prompt, and each chunk of its rows feeds
    ``[prompt[-1], gen[:-1]]`` (right-padded) against a copy of that cache.
    """
    offsets = np.concatenate([[0], np.cumsum([len(g) for g in gens])]).astype(np.int64)
    budget = max(1, LOGITS_BUDGET // vocab_size)
    with torch.inference_mode():
        for pi in np.unique(prompt_index):
            rows = [r for r in np.flatnonzero(prompt_index == pi) if gens[r]]
            if not rows:
                continue
            head = torch.as_tensor(prompts[int(pi)][:-1], dtype=torch.long, device=device)[None, :]
            heads = []
            for fast in fasts:
                cache = fast.new_cache()
                if head.shape[1]:
                    fast(head, None, None, cache, logits_to_keep=1)
                heads.append(cache)
            tails = [[prompts[int(pi)][-1], *gens[r][:-1]] for r in rows]
            order = sorted(range(len(rows)), key=lambda j: len(tails[j]))
            for chunk in forward_batches(order, [len(t) for t in tails], max_batch_rows, budget):
                width = max(len(tails[j]) for j in chunk)
                ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
                mask = torch.ones((len(chunk), head.shape[1] + width), dtype=torch.long)
                mask[:, head.shape[1]:] = 0
                for i, j in enumerate(chunk):
                    ids[i, : len(tails[j])] = torch.as_tensor(tails[j], dtype=torch.long)
                    mask[i, head.shape[1] : head.shape[1] + len(tails[j])] = 1
                sel_rows = torch.as_tensor(np.concatenate([np.full(len(tails[j]), i) for i, j in enumerate(chunk)]))
                sel_cols = torch.as_tensor(np.concatenate([np.arange(len(tails[j])) for j in chunk]))
                dest = np.concatenate([np.arange(offsets[rows[j]], offsets[rows[j] + 1]) for j in chunk])
                picked = []
                for fast, head_cache in zip(fasts, heads, strict=True):
                    cache = fast.new_cache()
                    for layer, (k, v) in enumerate(zip(head_cache.keys, head_cache.values, strict=True)):
                        if k is not None and v is not None:
                            cache.keys[layer] = k.expand(len(chunk), -1, -1, -1)
                            cache.values[layer] = v.expand(len(chunk), -1, -1, -1)
                    logits = fast(ids.to(device), mask.to(device), None, cache)
                    picked.append(logits[sel_rows, sel_cols].float().cpu())
                    del logits, cache
                yield dest, picked


def _forward(model: Any, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # [rows, width, vocab] logits
    """Logits of right-padded ``ids`` [rows, width]: the lean bit-identical forward when the model has one."""
    fast = fast_model(model)
    if fast is not None:
        return fast(ids, mask)
    return model(input_ids=ids, attention_mask=mask).logits


def forward_batches(order: list[int], sizes: list[int], max_rows: int, max_tokens: int) -> list[list[int]]:
    """The forward batches of the oracle: ``order`` (sorted by size) cut into runs of at most ``max_rows`` rows
    and ``max_tokens`` padded tokens. Public because worker scoring cuts its tasks along these very batches."""
    chunks: list[list[int]] = []
    current: list[int] = []
    for i in order:
        if current and (len(current) >= max_rows or (len(current) + 1) * sizes[i] > max_tokens):
            chunks.append(current)
            current = []
        current.append(i)
    if current:
        chunks.append(current)
    return chunks


def _row_slices(rows: int, vocab: int) -> Iterator[tuple[int, int]]:
    """``[lo, hi)`` slices of ``rows`` with at most ``FIELDS_BUDGET // vocab`` rows (at least one) each."""
    step = max(1, FIELDS_BUDGET // max(1, vocab))
    for lo in range(0, rows, step):
        yield lo, min(rows, lo + step)


def _slice_fields(
    logits: list[torch.Tensor], tokens: torch.Tensor, params: SamplingParams, eos_token_id: int | None,
    history: TokenHistory | None = None,
) -> dict[str, np.ndarray]:
    """Every per-token field of a slice: raw ``logits`` [n, V] of the target (and the draft), emitted ``tokens`` [n],
    and each token's penalty ``history`` [n, V] (None without a penalty).

    Row-wise throughout (processing, reductions over V), so a slice's numbers are those of
    the same rows in a larger batch; the float64 copies live for one slice only.
    """
    probs = process_logits(logits[0], params, eos_token_id=eos_token_id, history=history)  # [n, V] float32
    part = _token_fields(probs, tokens)
    part["raw_top2_margin"] = _top2_margin(logits[0]).numpy()
    # the truncations act on the biased, penalised logits: the margin is measured there (min-p is left out,
    # which can only make a margin smaller, so a token min-p alone excludes is never called a sure leak)
    # (after the grammar mask, which no logit error undoes: a token outside the grammar has margin inf)
    shifted = (bias_and_penalties(grammar_cut(logits[0].float(), params, history), params, history)
               if params.extra_fields else logits[0])
    part["exclusion_margin"] = _exclusion_margin(shifted, tokens, part["prob"], params, eos_token_id)
    if len(logits) > 1:
        draft = process_logits(logits[1], params, eos_token_id=eos_token_id, history=history)
        part.update(_draft_fields(probs, draft, tokens))
    return part


def _exclusion_margin(logits: torch.Tensor, tokens: torch.Tensor, prob: np.ndarray, params: SamplingParams,
                      eos_token_id: int | None) -> np.ndarray:
    """Delta*(x) of the tokens of probability 0 (0 elsewhere and in greedy cases), raw-logit nats."""
    out = np.zeros(len(prob), dtype=np.float64)
    zero = np.flatnonzero(np.asarray(prob) <= 0)
    if params.greedy or zero.size == 0:
        return out
    raw = logits[torch.as_tensor(zero)].double()
    if params.ignore_eos and eos_token_id is not None:
        raw[:, eos_token_id] = float("-inf")  # as process_logits: no finite error admits it
    out[zero] = exclusion_margins(raw.numpy(), tokens[torch.as_tensor(zero)].numpy(), temperature=params.temperature,
                                  top_k=params.top_k, top_p=params.top_p)
    return out


def _top2_margin(logits: torch.Tensor) -> torch.Tensor:  # logits [N, V] -> [N] float64 nats
    top = torch.topk(torch.log_softmax(logits.double(), dim=-1), 2, dim=-1).values
    return top[:, 0] - top[:, 1]


def _token_fields(probs: torch.Tensor, tokens: torch.Tensor) -> dict[str, np.ndarray]:
    """Per-token numbers of p (``probs`` [N, V]) at the emitted ``tokens`` [N]."""
    p = probs.double()
    px = p.gather(1, tokens[:, None])  # [N, 1]
    ids = torch.arange(p.shape[1])[None, :]
    before = (p > px) | ((p == px) & (ids < tokens[:, None]))  # ranked before x: larger p, ties by lower id
    logp_all = torch.where(p > 0, torch.log(p.clamp(min=1e-300)), torch.zeros_like(p))
    mean = (p * logp_all).sum(dim=1)
    var = (p * logp_all.square()).sum(dim=1) - mean.square()
    m4 = (p * (logp_all - mean[:, None]).pow(4)).sum(dim=1)
    argmax = p.argmax(dim=1)  # first maximal index: ties to the lowest id
    return {
        "prob": px[:, 0].numpy(),
        "cdf_before": (p * before).sum(dim=1).clamp(max=1.0).numpy(),
        "argmax_prob": p.max(dim=1).values.numpy(),
        "is_argmax": (argmax == tokens).numpy(),
        "logp": torch.log(px[:, 0]).numpy(),
        "logp_mean": mean.numpy(),
        "logp_var": var.clamp(min=0.0).numpy(),
        "logp_m4": m4.clamp(min=0.0).numpy(),
    }


def _draft_fields(probs: torch.Tensor, draft_probs: torch.Tensor, tokens: torch.Tensor) -> dict[str, np.ndarray]:
    """f = log q(x) - log p(x) at the emitted tokens, its mean and variance under p, TV(p, q), and the
    bounded draft score min(q / p, DRAFT_RATIO_CAP) with its mean, variance and fourth central moment under p."""
    p = probs.double()
    logq = torch.log(draft_probs.double().clamp(min=DRAFT_PROB_FLOOR))
    logp = torch.where(p > 0, torch.log(p.clamp(min=1e-300)), torch.zeros_like(p))
    f = torch.where(p > 0, logq - logp, torch.zeros_like(p))  # over p's support
    mean = (p * f).sum(dim=1)
    var = (p * f.square()).sum(dim=1) - mean.square()
    px = p.gather(1, tokens[:, None])[:, 0]
    llr = logq.gather(1, tokens[:, None])[:, 0] - torch.log(px)
    q = draft_probs.double()
    tv = 0.5 * (p - q).abs().sum(dim=1)
    ratio = torch.where(p > 0, torch.clamp(q / p.clamp(min=1e-300), max=DRAFT_RATIO_CAP),
                        torch.full_like(p, DRAFT_RATIO_CAP))
    r_mean = (p * ratio).sum(dim=1)
    r_dev = ratio - r_mean[:, None]
    return {"draft_llr": llr.numpy(), "draft_llr_mean": mean.numpy(), "draft_llr_var": var.clamp(min=0.0).numpy(),
            "draft_tv": tv.clamp(0.0, 1.0).numpy(), "draft_ratio": ratio.gather(1, tokens[:, None])[:, 0].numpy(),
            "draft_ratio_mean": r_mean.numpy(), "draft_ratio_var": (p * r_dev.square()).sum(dim=1).clamp(min=0.0).numpy(),
            "draft_ratio_m4": (p * r_dev.pow(4)).sum(dim=1).numpy()}
