"""The mutant gallery: the reference speculative engine with ONE deliberate, documented bug each.

Every mutant is a small subclass of :class:`~speceq.engines.reference.ReferenceSpeculativeEngine`
overriding one hook (see that class's docstring), so the bug is the only difference from
the correct engine. The gallery also holds LOSSLESS variants that look wrong but sample
exactly the target law (a draft at another temperature, the target as its own draft, k = 1,
an untruncated draft): a sound test must flag the bugs and leave these alone.

``MUTANTS`` maps a name to its :class:`MutantSpec`; :func:`make_mutant` builds one (the
registry resolves ``"mutant:<name>"`` to it). :func:`enumerable` says whether a mutant's
true TV shift at the first two generated positions can be computed exactly by enumeration
on the models (:func:`speceq.power.exact.exact_tv`): the bugs that act on the per-step
law; bugs that act only at batch size > 1 or only after a rejection are measured
empirically by the calibration.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from speceq.core.params import SamplingParams
from speceq.core.processing import TokenHistory, bias_and_penalties, min_p_cut, process_logits
from speceq.engines._kv import SlotCache
from speceq.engines._options import unknown_options_message
from speceq.engines.reference import ReferenceSpeculativeEngine
from speceq.engines.rejection import gather_token_probs
from speceq.errors import ConfigError, EngineNotFound
from speceq.models.grammar import RowGrammar
from speceq.models.text_decoding import row_decoder

#: Default exponent of the biased accept ratio min(1, (p/q)^power).
DEFAULT_POWER = 0.9
#: Default weight of the draft in the mixture mutant.
DEFAULT_MIX = 0.1
#: Default verify steps whose uniforms the "shared-uniforms" mutant shares across a batch's rows.
DEFAULT_SHARED_STEPS = 1
#: Default temperature of the draft in the lossless "draft-other-temperature" variant.
DEFAULT_DRAFT_TEMPERATURE = 1.0


class _Mutant(ReferenceSpeculativeEngine):
    """Base of the gallery: records the mutant's name and options in ``describe()``."""

    MUTANT = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("name", f"mutant:{self.MUTANT}")
        super().__init__(*args, **kwargs)

    def mutant_options(self) -> dict[str, Any]:
        """Options of the mutant's own (beyond the reference engine's), for provenance."""
        return {}

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "mutant": self.MUTANT, "mutant_options": self.mutant_options()}


def _number_option(value: Any, name: str, where: str, lo: float, hi: float, *, lo_open: bool = False) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok:
        v = float(value)
        ok = (lo < v if lo_open else lo <= v) and v <= hi
    if not ok:
        left = "(" if lo_open else "["
        raise ConfigError(f"expected a number in {left}{lo:g}, {hi:g}], got {value!r}", where=f"{where}.{name}")
    return float(value)


# ---- bugs ----------------------------------------------------------------------------------
class ResampleFromTarget(_Mutant):
    """After a rejection the replacement is drawn from p instead of norm(max(0, p - q))."""

    MUTANT = "resample-from-target"

    def residual(self, target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
        return target_probs


class BonusFromDraft(_Mutant):
    """The bonus token after k acceptances is drawn from the draft's q instead of the target's p."""

    MUTANT = "bonus-from-draft"

    def bonus_probs(self, target_probs: torch.Tensor, draft_probs: torch.Tensor | None) -> torch.Tensor:
        if draft_probs is None:  # the loop always passes q when this hook is overridden
            raise ConfigError("the draft's q at the bonus position is missing", where=f"{self.name}.bonus_probs")
        return draft_probs


class TargetWithoutTemperature(_Mutant):
    """Temperature on the draft only: the verifier's target law is computed at T = 1.

    The draft proposes at the request temperature, the target is verified untempered, so the
    engine samples the target at T = 1 whatever T was asked (T = 0 becomes plain sampling).
    """

    MUTANT = "target-no-temperature"

    def process_target(
        self, logits: torch.Tensor, params: SamplingParams, history: TokenHistory | None = None
    ) -> torch.Tensor:
        return process_logits(logits, dataclasses.replace(params, temperature=1.0), eos_token_id=self.eos_token_id,
                              history=history)


class TopKDraftOnly(_Mutant):
    """top-k on the draft only: the target law is not truncated, so tokens outside the top k leak."""

    MUTANT = "top-k-draft-only"

    def process_target(
        self, logits: torch.Tensor, params: SamplingParams, history: TokenHistory | None = None
    ) -> torch.Tensor:
        return process_logits(logits, dataclasses.replace(params, top_k=0), eos_token_id=self.eos_token_id,
                              history=history)


class TopPDraftOnly(_Mutant):
    """top-p on the draft only: the target law is not truncated to its nucleus."""

    MUTANT = "top-p-draft-only"

    def process_target(
        self, logits: torch.Tensor, params: SamplingParams, history: TokenHistory | None = None
    ) -> torch.Tensor:
        return process_logits(logits, dataclasses.replace(params, top_p=1.0), eos_token_id=self.eos_token_id,
                              history=history)


class GreedyAcceptance(_Mutant):
    """Greedy verification while sampling: a draft is accepted iff it is the target's argmax.

    The replacement after a rejection stays the residual norm(max(0, p - q)).
    """

    MUTANT = "greedy-acceptance"

    def accept_probs(
        self, target_probs: torch.Tensor, draft_probs: torch.Tensor, draft_tokens: torch.Tensor
    ) -> torch.Tensor:
        return (draft_tokens == target_probs.argmax(dim=-1)).to(target_probs.dtype)


class BiasedAcceptRatio(_Mutant):
    """Accept with min(1, (p/q)^power) instead of min(1, p/q) (``power`` = 0.9 by default)."""

    MUTANT = "biased-ratio"

    def __init__(self, *args: Any, power: float = DEFAULT_POWER, **kwargs: Any) -> None:
        self.power = _number_option(power, "power", f"mutant:{self.MUTANT}", 0.0, 10.0, lo_open=True)
        super().__init__(*args, **kwargs)

    def mutant_options(self) -> dict[str, Any]:
        return {"power": self.power}

    def accept_probs(
        self, target_probs: torch.Tensor, draft_probs: torch.Tensor, draft_tokens: torch.Tensor
    ) -> torch.Tensor:
        ratio = gather_token_probs(target_probs, draft_tokens) / gather_token_probs(draft_probs, draft_tokens)
        return torch.clamp(ratio.pow(self.power), max=1.0)


class UnnormalisedResidual(_Mutant):
    """The replacement is drawn from max(0, p - q) without dividing by its mass.

    What an inverse-CDF sampler does when it is handed the unnormalised residual: with
    u ~ U[0, 1) searched in cumsum(max(0, p - q)), which ends at the residual mass m < 1,
    every u >= m runs off the end of the vocabulary and is clamped to the last id. So the
    law is max(0, p - q) plus 1 - m on token ``leftover_token`` (default: the last id,
    V - 1, ``<pad>`` in the bundled vocabulary).
    """

    MUTANT = "unnormalised-residual"

    def __init__(self, *args: Any, leftover_token: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        token = self.vocab_size - 1 if leftover_token is None else leftover_token
        if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < self.vocab_size:
            raise ConfigError(f"expected a token id in [0, {self.vocab_size}), got {leftover_token!r}",
                              where=f"mutant:{self.MUTANT}.leftover_token")
        self.leftover_token = token

    def mutant_options(self) -> dict[str, Any]:
        return {"leftover_token": self.leftover_token}

    def residual(self, target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
        residual = torch.clamp(target_probs - draft_probs, min=0.0)
        leftover = torch.clamp(1.0 - residual.sum(dim=-1), min=0.0)
        residual = residual.clone()
        residual[..., self.leftover_token] += leftover
        return residual


class CacheColumnPositions(_Mutant):
    """Position ids from the shared cache column index instead of each row's own token count.

    Like an HF-style ``cache_position`` shared by the whole batch: left padding, dummy slots
    and rolled-back draft slots still advance a row's positions. Under rotary embeddings a
    constant offset is harmless, but the rolled-back slots a row leaves in the middle of a
    ragged batch open gaps in its positions. At batch size 1 every rolled-back slot is
    trailing and cropped, so the bug acts only at batch size > 1.
    """

    MUTANT = "wrong-positions"

    def position_ids(self, slots: SlotCache, valid: torch.Tensor) -> torch.Tensor:
        width = valid.shape[1]
        cols = torch.arange(slots.columns, slots.columns + width, device=valid.device)
        return cols[None, :].expand(valid.shape[0], width)


class NoRollback(_Mutant):
    """Rejected draft tokens stay visible in both KV caches (no rollback after verification)."""

    MUTANT = "no-rollback"

    def rollback(self, slots: SlotCache, keep: torch.Tensor) -> None:
        return None


class MixtureTowardDraft(_Mutant):
    """The verifier's target is (1 - mix) p + mix q, so emitted tokens follow that mixture.

    Tokens drawn by accept/residual (every token but the bonus) follow the mixture exactly;
    bonus tokens keep p. TV shift per step: mix * TV(p, q). ``mix`` in [0, 1] (default 0.1)
    tunes the shift for power curves.
    """

    MUTANT = "mixture"

    def __init__(self, *args: Any, mix: float = DEFAULT_MIX, **kwargs: Any) -> None:
        self.mix = _number_option(mix, "mix", f"mutant:{self.MUTANT}", 0.0, 1.0)
        super().__init__(*args, **kwargs)

    def mutant_options(self) -> dict[str, Any]:
        return {"mix": self.mix}

    def effective_target(self, target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
        return (1.0 - self.mix) * target_probs + self.mix * draft_probs


class PenaltyHistoryLate(_Mutant):
    """The penalty history is updated one token late after verification.

    Each step's processing (draft and verifier alike) misses the row's last committed token, the
    one the verifier itself drew (replacement or bonus): it is counted only from the step after.
    So that token escapes the repetition / frequency / presence penalty at the next positions.
    """

    MUTANT = "penalty-history-late"

    def step_history(self, history: TokenHistory, last_token: torch.Tensor, has_output: torch.Tensor) -> TokenHistory:
        counts = history.output_counts.clone()
        rows = torch.nonzero(has_output).squeeze(1)
        counts[rows, last_token[rows]] -= 1.0
        return TokenHistory(history.prompt_mask, counts)


class PenaltyBlockStart(_Mutant):
    """The verifier computes a whole block's penalties from the block's starting history.

    The draft penalises its own proposals as it goes, but the target's law at block position j
    ignores d_1..d_j, so repeated drafts are verified against an unpenalised target.
    """

    MUTANT = "penalty-block-start"

    def block_history(self, history: TokenHistory, draft_tokens: torch.Tensor) -> TokenHistory:
        rows, k = draft_tokens.shape
        V = history.output_counts.shape[-1]
        return TokenHistory(history.prompt_mask[:, None, :].expand(rows, k + 1, V),
                            history.output_counts[:, None, :].expand(rows, k + 1, V))


class MinPUntempered(_Mutant):
    """The verifier measures min-p on the untempered law (``vllm`` order: before dividing by T).

    Below T = 1 the tempered law is peakier, so min-p should drop more tokens than the T = 1
    law does: the tokens between the two thresholds leak into the verified law.
    """

    MUTANT = "min-p-untempered"

    def process_target(
        self, logits: torch.Tensor, params: SamplingParams, history: TokenHistory | None = None
    ) -> torch.Tensor:
        if params.greedy or params.min_p == 0.0:
            return process_logits(logits, params, eos_token_id=self.eos_token_id, history=history)
        x = logits.float()
        if params.ignore_eos and self.eos_token_id is not None:
            x = x.clone()
            x[..., self.eos_token_id] = float("-inf")
        x = min_p_cut(bias_and_penalties(x, params, history), params.min_p)  # measured at T = 1
        rest = dataclasses.replace(params, min_p=0.0, logit_bias=(), repetition_penalty=1.0, presence_penalty=0.0,
                                   frequency_penalty=0.0)
        return process_logits(x, rest, eos_token_id=self.eos_token_id)


class LogitBiasDroppedAtVerification(_Mutant):
    """logit_bias on the draft only: the verifier's target law is computed without it (cf. vllm#42744)."""

    MUTANT = "logit-bias-verify-dropped"

    def process_target(
        self, logits: torch.Tensor, params: SamplingParams, history: TokenHistory | None = None
    ) -> torch.Tensor:
        return process_logits(logits, dataclasses.replace(params, logit_bias=()), eos_token_id=self.eos_token_id,
                              history=history)


class StopAtBlockEnd(_Mutant):
    """Stop strings checked once per verified block, on the block's end only.

    The row's text is searched after the whole block is appended, and a stop string found
    there ends the row at the block's end: a stop string completed inside an accepted block
    lets the row run on past it (the tokens after it in the block are kept).
    """

    MUTANT = "stop-at-block-end"

    def stop_length(self, row: list[int], committed: int, params: SamplingParams) -> int | None:
        text = row_decoder(params.tokenizer or "")(row)
        return len(row) if any(s in text for s in params.stop) else None


class SharedUniforms(_Mutant):
    """Every row of a batch draws its first ``steps`` verify steps at the SAME uniforms.

    One uniform per draw is drawn for the whole batch and handed to every row (a sampler that
    draws ``torch.rand(k)`` where it needed ``torch.rand(rows, k)``). Each row on its own still
    follows the target law exactly (its uniforms are fresh and uniform), but rows of one batch are
    dependent: rows of the same prompt start identically. ``steps`` >= 1 (default 1, the first
    step's draft, accept and next-token uniforms), or 0 for every step.
    """

    MUTANT = "shared-uniforms"

    def __init__(self, *args: Any, steps: int = DEFAULT_SHARED_STEPS, **kwargs: Any) -> None:
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ConfigError(f"expected an integer >= 0, got {steps!r}", where=f"mutant:{self.MUTANT}.steps")
        self.steps = steps
        super().__init__(*args, **kwargs)

    def mutant_options(self) -> dict[str, Any]:
        return {"steps": self.steps}

    def draw_uniforms(self, shape: tuple[int, ...], gen: torch.Generator, step: int) -> torch.Tensor:
        if self.steps and step >= self.steps:
            return super().draw_uniforms(shape, gen, step)
        one = torch.rand(shape[1:], generator=gen, dtype=torch.float64, device=self.device)
        return one.expand(shape).clone()


class GrammarNotAdvancedOverDrafts(_Mutant):
    """The grammar state is not advanced over accepted drafts (cf. vllm#9423).

    After verification the row's grammar state consumes only the token the verifier drew (the
    replacement or bonus token), as a non-speculative engine does with its one token per step; the
    accepted drafts are emitted but never consumed. The state falls behind the row's text, so later
    masks come from the wrong position: rows leave the grammar (a token the stale state rejects is
    dropped from it, as xgrammar's and vLLM's ``accept_tokens`` leave a state on failure).
    """

    MUTANT = "grammar-not-advanced-over-drafts"

    def grammar_commit(self, state: RowGrammar, emitted: list[int], accepted: int) -> None:
        state.advance(emitted[accepted:])


# ---- lossless variants ---------------------------------------------------------------------
class DraftOtherTemperature(_Mutant):
    """LOSSLESS: temperature on the target only; the draft proposes at ``draft_temperature`` (default 1).

    Looks like a one-sided temperature bug, but the verifier divides by the same q the draft
    sampled from, and rejection sampling is exact for any proposal law.
    """

    MUTANT = "draft-other-temperature"

    def __init__(self, *args: Any, draft_temperature: float = DEFAULT_DRAFT_TEMPERATURE, **kwargs: Any) -> None:
        self.draft_temperature = _number_option(draft_temperature, "draft_temperature", f"mutant:{self.MUTANT}",
                                                0.0, 100.0, lo_open=True)
        super().__init__(*args, **kwargs)

    def mutant_options(self) -> dict[str, Any]:
        return {"draft_temperature": self.draft_temperature}

    def process_draft(
        self, logits: torch.Tensor, params: SamplingParams, history: TokenHistory | None = None
    ) -> torch.Tensor:
        other = dataclasses.replace(params, temperature=self.draft_temperature)
        return process_logits(logits, other, eos_token_id=self.eos_token_id, history=history)


class DraftUntruncated(_Mutant):
    """LOSSLESS: the draft proposes without top-k / top-p (the target keeps them)."""

    MUTANT = "draft-untruncated"

    def process_draft(
        self, logits: torch.Tensor, params: SamplingParams, history: TokenHistory | None = None
    ) -> torch.Tensor:
        plain = dataclasses.replace(params, top_k=0, top_p=1.0)
        return process_logits(logits, plain, eos_token_id=self.eos_token_id, history=history)


class DraftIsTarget(_Mutant):
    """LOSSLESS: the target model is its own draft (every proposal is accepted)."""

    MUTANT = "draft-is-target"

    def __init__(self, target: Any = None, draft: Any = None, **kwargs: Any) -> None:
        if draft is not None:
            raise ConfigError("this variant uses the target as its draft; do not pass a draft",
                              where=f"mutant:{self.MUTANT}.draft")
        if target is None:
            from speceq.models import TARGET_DIR

            target = TARGET_DIR
        super().__init__(target, target, **kwargs)


class KOne(_Mutant):
    """LOSSLESS: one draft token per step (k = 1), so every other token is a bonus token."""

    MUTANT = "k1"

    def __init__(self, *args: Any, k: int = 1, **kwargs: Any) -> None:
        super().__init__(*args, k=k, **kwargs)


# ---- registry ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class MutantSpec:
    """One entry of the gallery.

    name: the ``mutant:<name>`` suffix. cls: the engine class. bug: what is wrong (or, for a
    lossless variant, why it only looks wrong). bug_class: ``rejection`` (accept/residual
    arithmetic), ``bonus``, ``processing`` (temperature / top-k / top-p on one side),
    ``request-fields`` (min_p, penalties, logit_bias or stop strings applied wrongly),
    ``cache`` (KV rollback), ``batch`` (acts only at batch size > 1), ``mixture`` or
    ``lossless``. exact: its per-step law is computable by enumeration (:func:`speceq.power.exact.exact_tv`).
    params: sampling parameters under which the bug acts (overrides of SamplingParams'
    defaults used by the calibration). options: engine options of the calibration (e.g.
    ``k=1`` so that a bonus bug acts at position 1, where its TV is computed exactly).
    row_law: how the TV between one-row laws is known (:mod:`speceq.power.ceiling`):
    ``support`` (exact: the chance a row leaves the target's support), ``mixture`` (a bound)
    or None (not known). contract: its rows break the engine contract
    (:func:`speceq.engines.base.validate_batch` raises EngineError naming the row and
    position), so every run stops on it before any statistics; ``speceq power`` leaves it out.
    """

    name: str
    cls: type[ReferenceSpeculativeEngine]
    bug: str
    bug_class: str
    lossless: bool = False
    exact: bool = True
    params: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    row_law: str | None = None
    contract: bool = False


def _spec(cls: type[_Mutant], bug_class: str, bug: str, **kw: Any) -> tuple[str, MutantSpec]:
    return cls.MUTANT, MutantSpec(name=cls.MUTANT, cls=cls, bug=bug, bug_class=bug_class, **kw)


MUTANTS: dict[str, MutantSpec] = dict([
    _spec(ResampleFromTarget, "rejection", "after a rejection, resamples from p instead of norm(max(0, p - q))"),
    _spec(BonusFromDraft, "bonus", "draws the bonus token from the draft's q instead of the target's p",
          options={"k": 1}),
    _spec(TargetWithoutTemperature, "processing",
          "temperature on the draft only: the target is verified at T = 1", params={"temperature": 0.7}),
    _spec(TopKDraftOnly, "processing", "top-k on the draft only: the target is not truncated",
          params={"top_k": 10}, row_law="support"),
    _spec(TopPDraftOnly, "processing", "top-p on the draft only: the target is not truncated",
          params={"top_p": 0.9}, row_law="support"),
    _spec(GreedyAcceptance, "rejection", "accepts a draft iff it is the target's argmax, while sampling"),
    _spec(BiasedAcceptRatio, "rejection", "accept ratio min(1, (p/q)^0.9) instead of min(1, p/q)"),
    _spec(UnnormalisedResidual, "rejection",
          "residual max(0, p - q) not renormalised: inverse-CDF overrun lands on the last token id"),
    _spec(CacheColumnPositions, "batch",
          "position ids from the shared cache column (padding and rolled-back slots counted)", exact=False),
    _spec(NoRollback, "cache", "rejected draft tokens stay visible in the KV caches", exact=False),
    _spec(MixtureTowardDraft, "mixture", "verifies against (1 - mix) p + mix q (mix = 0.1 by default)",
          row_law="mixture"),
    _spec(PenaltyHistoryLate, "request-fields",
          "the penalty history misses each row's last committed token (updated one token late after verification)",
          exact=False, params={"frequency_penalty": -1.0, "presence_penalty": -2.0}, options={"k": 2}),
    _spec(PenaltyBlockStart, "request-fields",
          "the verifier computes a whole block's penalties from the block's starting history", exact=False,
          params={"frequency_penalty": -1.0, "presence_penalty": -2.0}, options={"k": 2}),
    _spec(MinPUntempered, "request-fields", "the verifier measures min-p on the untempered law", exact=False,
          params={"temperature": 0.5, "min_p": 0.1}),
    _spec(LogitBiasDroppedAtVerification, "request-fields", "logit_bias applied by the draft, dropped at verification",
          exact=False, params={"logit_bias": {"32": 3.0}}),
    _spec(StopAtBlockEnd, "request-fields",
          "stop strings checked at block ends only: a row runs on past a stop string inside an accepted block",
          exact=False, contract=True, params={"stop": (" ",), "tokenizer": "bytes"}, options={"k": 4}),
    _spec(SharedUniforms, "batch",
          "the rows of a batch share their first verify step's uniforms: each row's law exact, the rows dependent",
          exact=False),
    _spec(GrammarNotAdvancedOverDrafts, "request-fields",
          "the grammar state consumes only the verifier's drawn token, not the accepted drafts", exact=False,
          params={"structured_outputs": {"choice": ["main():", "test_all():", "run(x):"]}, "tokenizer": "bytes"},
          options={"k": 4}),
    _spec(DraftOtherTemperature, "lossless",
          "temperature on the target only, draft at T = 1: the ratio uses the q the draft sampled from",
          lossless=True, params={"temperature": 0.7}),
    _spec(DraftUntruncated, "lossless", "draft proposes without top-k/top-p: lossless for any proposal law",
          lossless=True, params={"top_k": 10}),
    _spec(DraftIsTarget, "lossless", "the target is its own draft: everything is accepted", lossless=True),
    _spec(KOne, "lossless", "one draft per step: half the tokens are bonus tokens", lossless=True),
])


def make_mutant(name: str, **options: Any) -> ReferenceSpeculativeEngine:
    """Build the mutant ``name`` of :data:`MUTANTS` with engine ``options``.

    Options are those of :class:`ReferenceSpeculativeEngine` (target, draft, k, device,
    dtype, threads, trace, ...) plus the mutant's own (``mix``, ``power``,
    ``leftover_token``, ``draft_temperature``). Raises EngineNotFound for an unknown name
    (with "did you mean") and ConfigError for options that do not fit.
    """
    spec = MUTANTS.get(name)
    if spec is None:
        close = difflib.get_close_matches(str(name), list(MUTANTS), n=3, cutoff=0.5)
        hint = f" Did you mean {' or '.join(repr(f'mutant:{c}') for c in close)}?" if close else ""
        raise EngineNotFound(f"unknown mutant {name!r}.{hint} Known mutants: {', '.join(MUTANTS)}")
    allowed = _option_names(spec.cls)
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ConfigError(unknown_options_message(unknown, sorted(allowed)), where=f"mutant:{name}")
    return spec.cls(**options)


def _option_names(cls: type) -> set[str]:
    """Keyword options of ``cls``: its own ``__init__`` parameters and the reference engine's."""
    names: set[str] = set()
    for klass in (ReferenceSpeculativeEngine, cls):
        for p in inspect.signature(klass.__init__).parameters.values():
            if p.name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                names.add(p.name)
    return names


def enumerable(engine: ReferenceSpeculativeEngine) -> bool:
    """Whether ``engine``'s law at the first positions follows from its per-step hooks alone."""
    if type(engine) is ReferenceSpeculativeEngine:
        return True
    spec = MUTANTS.get(getattr(engine, "MUTANT", ""))
    return spec is not None and spec.cls is type(engine) and spec.exact
