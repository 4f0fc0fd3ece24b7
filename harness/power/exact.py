"""Exact laws of a speculative engine's first two generated tokens, by enumeration.

For an engine whose bug (if any) lives in its per-step hooks (processing, accept ratio,
residual, bonus, effective target), the law of the first two tokens follows from the
models' next-token laws at the prompt and at the V prompts extended by one token:

- position 0: the first verify step with k1 = min(k, max_new_tokens - 1) drafts emits its
  first token from the single-step law S(p1, q1) (the bonus law when k1 = 0);
- position 1, given x1: when k1 >= 2 both branches (x1 an accepted draft, or x1 the
  replacement after a rejection, which starts a new block) emit x2 from S(p2, q2); when
  k1 = 1 an accepted x1 is followed by the bonus law B(p2, q2) and a replacement by a new
  block of k2 = min(k, max_new_tokens - 2) drafts (S, or B when k2 = 0). After EOS the
  position holds END.

The engine's own hook methods compute S and B, so a mutant's law comes from its own code.
The target law is the processed target p1(x1) p2(x2 | x1). Symbols are token ids 0..V-1
and END = V (index V of every law vector). :func:`exact_tv` gives a gallery mutant's true TV
shift per position (None when its bug is not enumerable).

Memory is bounded at any vocabulary: above :data:`EXACT_ONE_PASS_LOGITS` the V extended
prompts run in blocks of at most :data:`EXACT_LOGITS_BUDGET` logits, the second position's
laws are reduced block by block, and the ``[V, V + 1]`` joint laws are kept only up to
:data:`JOINT_MAX_ENTRIES` entries.
Time grows as V forward rows plus 2 V calls of the engine's hooks on ``[V]`` laws.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from speceq.core.processing import TokenHistory, process_logits, token_history
from speceq.engines.mutants import enumerable, make_mutant
from speceq.engines.reference import ReferenceSpeculativeEngine
from speceq.errors import ConfigError
from speceq.inputs.cases import Case
from speceq.models.fast_forward import fast_model

#: Most logits (floats) of the single forward pass over all V extended prompts: 2**26 (256 MiB;
#: the byte world's V = 259 up to 999 prompt tokens). Larger enumerations run in blocks.
EXACT_ONE_PASS_LOGITS = 2**26
#: Most logits (floats) of one block's forward pass and laws: 2**22 (16 MiB; 131 first tokens at V = 32 000).
EXACT_LOGITS_BUDGET = 2**22
#: Largest joint law (entries of ``[V, V + 1]``) kept in :class:`ExactLaws`: 2**24 (128 MiB
#: in float64, V <= 4 095). Above it only the marginals are returned (at V = 32 000 a joint
#: law would take 8 GB).
JOINT_MAX_ENTRIES = 2**24


@dataclass(frozen=True, slots=True)
class ExactLaws:
    """Exact laws of the first ``positions`` generated tokens of one case's prompt.

    engine / target: float64 ``[positions, V + 1]``, marginal law of each position (END
    last). joint_engine / joint_target: float64 ``[V, V + 1]`` law of (x1, x2) (None for one
    position, or when ``V (V + 1)`` exceeds :data:`JOINT_MAX_ENTRIES`). tv: TV(engine, target) per position. accept_rate: probability that the first
    draft is accepted (None when the first step drafts nothing).
    """

    engine: np.ndarray
    target: np.ndarray
    joint_engine: np.ndarray | None
    joint_target: np.ndarray | None
    tv: tuple[float, ...]
    accept_rate: float | None

    @property
    def positions(self) -> int:
        return int(self.engine.shape[0])


def _normalised(x: torch.Tensor) -> torch.Tensor:
    x = x.double()
    return x / x.sum(dim=-1, keepdim=True)


def _logits(model: torch.nn.Module, prompt: list[int], vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Raw next-token logits after the prompt ``[V]`` and after prompt + x for every x ``[V, V]``.

    One forward pass of all V rows (used while ``V (P + 1) V`` fits :data:`EXACT_ONE_PASS_LOGITS`).
    """
    ids = torch.tensor([prompt + [x] for x in range(vocab)], dtype=torch.long)
    device = next(model.parameters()).device
    with torch.inference_mode():
        logits = model(input_ids=ids.to(device)).logits.float().cpu()  # [V, P + 1, V]
    return logits[0, len(prompt) - 1], logits[:, len(prompt)]


def _one_pass(prompt: list[int], vocab: int) -> bool:
    """Whether the V extended prompts fit one forward pass (:data:`EXACT_ONE_PASS_LOGITS`)."""
    return vocab * (len(prompt) + 1) * vocab <= EXACT_ONE_PASS_LOGITS


def _prompt_logits(model: torch.nn.Module, prompt: list[int]) -> torch.Tensor:
    """Raw next-token logits ``[V]`` after the prompt alone."""
    device = next(model.parameters()).device
    with torch.inference_mode():
        return model(input_ids=torch.tensor([prompt], dtype=torch.long, device=device)).logits[0, -1].float().cpu()


def _extended_logits(model: torch.nn.Module, prompt: list[int], first: range) -> torch.Tensor:
    """Raw next-token logits ``[len(first), V]`` after prompt + x for each x in ``first``.

    Through the lean forward's ``logits_to_keep=1`` when the model has one (only the last
    position is projected on the vocabulary), else the full forward's last position.
    """
    ids = torch.tensor([prompt + [x] for x in first], dtype=torch.long)
    device = next(model.parameters()).device
    fast = fast_model(model)
    with torch.inference_mode():
        if fast is not None:
            return fast(ids.to(device), None, logits_to_keep=1)[:, -1].float().cpu()
        return model(input_ids=ids.to(device)).logits[:, -1].float().cpu()


def _blocks(prompt: list[int], vocab: int, fast: bool) -> list[range]:
    """First tokens 0..V-1 cut so that one block's forward stays within :data:`EXACT_LOGITS_BUDGET`."""
    per_row = vocab if fast else (len(prompt) + 1) * vocab
    step = max(1, EXACT_LOGITS_BUDGET // per_row)
    return [range(lo, min(vocab, lo + step)) for lo in range(0, vocab, step)]


def _step_law(engine: ReferenceSpeculativeEngine, p: torch.Tensor, q: torch.Tensor, k: int) -> torch.Tensor:
    """Law of the first token a verify step with ``k`` drafts emits, from processed p, q ``[V]``."""
    if k >= 1:
        return _normalised(engine.single_step_law(p, q))
    bonus_q = q[None] if engine.needs_bonus_draft_probs else None
    return _normalised(engine.bonus_probs(p[None], bonus_q)[0])


def _accepted_mass(engine: ReferenceSpeculativeEngine, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """P(first token = x and it is an accepted draft) = q(x) a(x), float64 ``[V]``."""
    V = p.shape[-1]
    p64, q64 = p.double(), q.double()
    p_eff = engine.effective_target(p64[None, None, :], q64[None, None, :])[0, 0]
    step = max(1, EXACT_LOGITS_BUDGET // V)  # draft tokens per call (the hook may expand [rows, 1, V])
    accept = torch.cat([
        engine.accept_probs(p_eff.expand(hi - lo, 1, V), q64.expand(hi - lo, 1, V),
                            torch.arange(lo, hi)[:, None])[:, 0].double()
        for lo, hi in ((lo, min(V, lo + step)) for lo in range(0, V, step))
    ])
    accept = torch.where(q64 > 0, accept, torch.zeros_like(accept))
    return q64 * accept


def _tv(a: np.ndarray, b: np.ndarray) -> float:
    return float(0.5 * np.abs(a - b).sum())


def _second_position(
    engine: ReferenceSpeculativeEngine, params: Any, t2: torch.Tensor, d2: torch.Tensor, first: torch.Tensor,
    accepted: torch.Tensor, p1: torch.Tensor, k1: int, k2: int, eos_kw: dict[str, Any],
    history: TokenHistory | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Rows of the joint laws (engine, target) ``[B, V + 1]`` for a block of first tokens.

    ``t2``/``d2``: raw logits ``[B, V]`` after prompt + x1 for the block's x1; ``first``,
    ``accepted``, ``p1``: the block's entries of the first-position laws; ``history``: the
    penalty history ``[B, V]`` of prompt + x1 (None without a penalty).
    """
    B, V = t2.shape
    p2 = _normalised(process_logits(t2, params, **eos_kw, history=history))  # [B, V]
    p2_e = engine.process_target(t2, params, history)
    q2_e = engine.process_draft(d2, params, history)
    within = torch.stack([_step_law(engine, p2_e[x], q2_e[x], 1) for x in range(B)])
    bonus = torch.stack([_step_law(engine, p2_e[x], q2_e[x], 0) for x in range(B)])
    new_block = within if k2 >= 1 else bonus
    if k1 >= 2:
        cond = first[:, None] * within
    else:  # k1 == 1 (L >= 2 here): accepted -> bonus, replaced -> new block
        cond = accepted[:, None] * bonus + (first - accepted)[:, None] * new_block
    part_e = np.zeros((B, V + 1))
    part_t = np.zeros((B, V + 1))
    part_e[:, :V] = cond.numpy()
    part_t[:, :V] = (p1[:, None] * p2).numpy()
    return part_e, part_t


def exact_laws(engine: ReferenceSpeculativeEngine, case: Case, positions: int = 2) -> ExactLaws:
    """Exact laws of the first ``positions`` (1 or 2) tokens of ``case``'s prompt (see the module docstring).

    The engine's batch layout is irrelevant for per-step hooks; ``case.companions`` are
    ignored. Raises ConfigError when the prompt does not fit the engine's vocabulary.
    """
    if positions not in (1, 2):
        raise ConfigError(f"expected 1 or 2, got {positions!r}", where="exact_laws.positions")
    params = case.params
    V = engine.vocab_size
    prompt = [int(t) for t in case.prompt_ids]
    case.check_vocab(V)
    L = params.max_new_tokens
    positions = min(positions, L)
    eos = None if params.ignore_eos else engine.eos_token_id
    eos_kw = {"eos_token_id": engine.eos_token_id}

    one_pass = _one_pass(prompt, V)
    if one_pass:
        t1, t2_all = _logits(engine.model, prompt, V)
        d1, d2_all = _logits(engine.draft, prompt, V)
    else:
        t1, d1 = _prompt_logits(engine.model, prompt), _prompt_logits(engine.draft, prompt)
    with torch.inference_mode():
        h1 = token_history([prompt], [[]], V) if params.uses_history else None  # [1, V]: the prompt only
        p1 = _normalised(process_logits(t1, params, **eos_kw) if h1 is None else
                         process_logits(t1[None], params, **eos_kw, history=h1)[0])
        p1_e = engine.process_target(t1[None], params, h1)[0]
        q1_e = engine.process_draft(d1[None], params, h1)[0]
        k1 = min(engine.k, L - 1)
        first = _step_law(engine, p1_e, q1_e, k1)
        accepted = _accepted_mass(engine, p1_e, q1_e)  # used only when k1 >= 1

        engine_law = np.zeros((positions, V + 1))
        target_law = np.zeros((positions, V + 1))
        engine_law[0, :V] = first.numpy()
        target_law[0, :V] = p1.numpy()
        joint_e = joint_t = None
        if positions == 2:
            k2 = min(engine.k, L - 2)
            keep_joint = V * (V + 1) <= JOINT_MAX_ENTRIES
            if keep_joint:
                joint_e = np.zeros((V, V + 1))
                joint_t = np.zeros((V, V + 1))
            fast = fast_model(engine.model) is not None and fast_model(engine.draft) is not None
            for block in [range(V)] if one_pass else _blocks(prompt, V, fast):
                if one_pass:
                    t2, d2 = t2_all, d2_all
                else:
                    t2, d2 = _extended_logits(engine.model, prompt, block), _extended_logits(engine.draft, prompt, block)
                rows = slice(block.start, block.stop)
                h2 = (token_history([prompt] * len(block), [[x] for x in block], V) if params.uses_history
                      else None)  # [B, V]: prompt + each first token
                part_e, part_t = _second_position(engine, params, t2, d2, first[rows], accepted[rows], p1[rows],
                                                  k1, k2, eos_kw, h2)
                if eos is not None and eos in block:
                    for part, law in ((part_e, first), (part_t, p1)):
                        part[eos - block.start, :] = 0.0
                        part[eos - block.start, V] = float(law[eos])
                if keep_joint:
                    joint_e[rows], joint_t[rows] = part_e, part_t
                else:
                    engine_law[1] += part_e.sum(axis=0)
                    target_law[1] += part_t.sum(axis=0)
            if keep_joint:
                engine_law[1] = joint_e.sum(axis=0)
                target_law[1] = joint_t.sum(axis=0)
    tv = tuple(_tv(engine_law[t], target_law[t]) for t in range(positions))
    rate = float(accepted.sum()) if k1 >= 1 else None
    return ExactLaws(engine=engine_law, target=target_law, joint_engine=joint_e, joint_target=joint_t, tv=tv,
                     accept_rate=rate)


def exact_tv(
    mutant: str | ReferenceSpeculativeEngine, case: Case, positions: int = 2
) -> list[float | None]:
    """True TV between the mutant's and the target's law of each of the first ``positions``
    generated tokens (1 or 2) of ``case``'s prompt, by exact enumeration on the models.

    Position 0 uses the (p, q) of the prompt; position 1 enumerates every first token (one
    batched forward pass per model). ``None`` for a mutant whose bug acts only at batch
    size > 1 or after a rejection ("not computed by enumeration"; measure it empirically).
    ``mutant``: a gallery name or a built engine.
    """
    engine = make_mutant(mutant) if isinstance(mutant, str) else mutant
    if not enumerable(engine):
        return [None] * _check_positions(positions)
    laws = exact_laws(engine, case, positions=_check_positions(positions))
    return [float(t) for t in laws.tv]


def _check_positions(positions: Any) -> int:
    if isinstance(positions, bool) or positions not in (1, 2):
        raise ConfigError(f"expected 1 or 2 (positions computed by enumeration), got {positions!r}",
                          where="exact_tv.positions")
    return int(positions)
