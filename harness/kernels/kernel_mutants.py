"""The kernel mutant gallery: the reference kernel with ONE real bug class each, and lossless variants.

Each mutant overrides one step of :class:`~speceq.kernels.reference_kernels.ReferenceChainKernel`; the
bug classes are the ones engines shipped (the ``source`` field names one public report of each).
The lossless variants look different (another RNG order and noise sharing, the one-hot path,
exact-match, block verification) but sample the target law exactly: a sound check flags every
mutant at its default budget and none of the variants.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from speceq.core.processing import min_p_cut
from speceq.kernels.contract import Kernel, Outcome, RaggedRequest
from speceq.kernels.reference_kernels import Dense, ReferenceChainKernel, reference_kernel

#: Tile width of the tiled samplers (FlashInfer / Triton kernels sample in vocabulary tiles).
TILE = 8192


class ResidualFromTarget(ReferenceChainKernel):
    """After a rejection the recovered token is drawn from p instead of norm(max(0, p - q))."""

    def residual(self, p: torch.Tensor, q: torch.Tensor | None, d: torch.Tensor) -> torch.Tensor:
        return p


class UnnormalisedResidual(ReferenceChainKernel):
    """The residual max(0, p - q) is not renormalised; the sampler assumes mass 1 and clamps to the last id."""

    def residual(self, p: torch.Tensor, q: torch.Tensor | None, d: torch.Tensor) -> torch.Tensor:
        return torch.clamp(p - q, min=0.0) if q is not None else super().residual(p, q, d)

    def sample(self, probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        c = probs.to(torch.float64).cumsum(dim=1)
        idx = torch.searchsorted(c, u.to(torch.float64)[:, None], right=True).squeeze(1)
        return idx.clamp(max=probs.shape[1] - 1)


class BonusFromDraft(ReferenceChainKernel):
    """The bonus token is drawn from the last draft position's q instead of the bonus row p."""

    def bonus_law(self, dense: Dense, rows: torch.Tensor) -> torch.Tensor:
        n = dense.n[rows]
        if dense.q is None:
            return super().bonus_law(dense, rows)
        q_last = dense.q[rows, (n - 1).clamp(min=0)]
        return torch.where((n > 0)[:, None], q_last, dense.p[rows, n])


class TargetWithoutTemperature(ReferenceChainKernel):
    """The target rows at the draft positions are processed at T = 1 (the bonus row keeps T)."""

    def process_draft_rows(self, logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                           top_p: torch.Tensor, min_p: torch.Tensor | None = None) -> torch.Tensor:
        return self.process(logits, torch.ones_like(temperature), top_k, top_p, min_p)


class TopPDraftRowsOff(ReferenceChainKernel):
    """top-p is applied to the bonus row only: the draft positions' target rows are not truncated."""

    def process_draft_rows(self, logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                           top_p: torch.Tensor, min_p: torch.Tensor | None = None) -> torch.Tensor:
        return self.process(logits, temperature, top_k, torch.ones_like(top_p), min_p)


class MinPUntempered(ReferenceChainKernel):
    """min-p is measured on the untempered law softmax(logits), not softmax(logits / T) (every row).

    At T < 1 it keeps tokens a correct kernel drops, at T > 1 it drops tokens a correct kernel keeps.
    """

    def _untempered_cut(self, logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                        top_p: torch.Tensor, min_p: torch.Tensor | None) -> torch.Tensor:
        if min_p is not None and bool((min_p > 0).any()):
            logits = min_p_cut(logits.to(torch.float32), min_p.to(torch.float32)[:, None])
        return self.process(logits, temperature, top_k, top_p)

    def process_draft_rows(self, logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                           top_p: torch.Tensor, min_p: torch.Tensor | None = None) -> torch.Tensor:
        return self._untempered_cut(logits, temperature, top_k, top_p, min_p)

    def process_bonus_rows(self, logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                           top_p: torch.Tensor, min_p: torch.Tensor | None = None) -> torch.Tensor:
        return self._untempered_cut(logits, temperature, top_k, top_p, min_p)


class MisalignedExpansion(ReferenceChainKernel):
    """Per-request values are expanded to draft tokens as if every request had max_spec_len drafts.

    Draft token t gets request t // max_spec_len's temperature / top-k / top-p: right for a
    batch of equal draft counts, wrong for a ragged batch (the bug class of vLLM's CPU expand).
    """

    def expand(self, values: torch.Tensor, request: RaggedRequest) -> torch.Tensor:
        k = max(request.max_spec_len, 1)
        idx = (torch.arange(request.num_tokens, device=values.device) // k).clamp(max=values.shape[0] - 1)
        return values[idx]


class GreedyTakesRandomPath(ReferenceChainKernel):
    """In a batch that is not all greedy, greedy rows are verified as random rows at T = 1."""

    def greedy_rows(self, req: RaggedRequest) -> torch.Tensor:
        g = req.temperature == 0
        return g if bool(g.all()) else torch.zeros_like(g)


class InclusiveAccept(ReferenceChainKernel):
    """Accept when u <= ratio: with u = 0 a draft of target probability 0 is accepted."""

    def accepted(self, u: torch.Tensor, ratio: torch.Tensor) -> torch.Tensor:
        return u <= ratio


class AcceptTargetArgmax(ReferenceChainKernel):
    """While sampling (T > 0) a draft is accepted iff it is the target's argmax."""

    def accept_probs(self, p: torch.Tensor, q: torch.Tensor | None, d: torch.Tensor) -> torch.Tensor:
        top = p[:, : d.shape[1]].argmax(dim=-1)
        return (d == top).to(torch.float64)


class SharedDraftResidualNoise(ReferenceChainKernel):
    """The recovered token is drawn with the rejected position's acceptance uniform (u >= ratio there)."""

    def recovered_uniforms(self, dense: Dense, rows: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
        return dense.u[rows, at]


class LastTileFallback(ReferenceChainKernel):
    """A tiled float32 inverse CDF: when u * total runs past the last prefix sum (u -> 1, rounding),
    it returns the last id of the padded last tile, >= vocab when V is not a multiple of 8192."""

    def sample(self, probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        v = probs.shape[1]
        padded = -(-v // TILE) * TILE
        c = probs.to(torch.float32).cumsum(dim=1)
        x = (u.to(torch.float32) * probs.to(torch.float32).sum(dim=1))[:, None]
        idx = torch.searchsorted(c, x, right=True).squeeze(1)
        return torch.where(idx >= v, torch.full_like(idx, padded - 1), idx)


class NanRowEmitsVocabSize(ReferenceChainKernel):
    """On a NaN target row the inverse CDF finds no token and returns the vocabulary size."""

    def sample(self, probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        c = probs.to(torch.float64).cumsum(dim=1)
        idx = torch.searchsorted(c, (u.to(torch.float64) * c[:, -1])[:, None], right=True).squeeze(1)
        nan = torch.isnan(c[:, -1])
        return torch.where(nan, torch.full_like(idx, probs.shape[1]), super().sample(probs, u))


class PaddingAsIndex(ReferenceChainKernel):
    """Padded layout: the -1 padding of shorter requests is used as an index (it wraps to id V - 1)."""

    def draft_counts(self, req):  # type: ignore[no-untyped-def]
        b, k = req.draft_token_ids.shape
        return torch.full((b,), k, dtype=torch.int64, device=req.draft_token_ids.device)

    def padded_drafts(self, req, n):  # type: ignore[no-untyped-def]
        return torch.remainder(req.draft_token_ids.to(torch.int64), req.vocab_size)


# ---- lossless variants ---------------------------------------------------------------------------
class ExponentialRace(ReferenceChainKernel):
    """LOSSLESS, other RNG order: ignores the injected uniforms; acceptance uniforms from its own
    generator drawn in reversed position order, recovered and bonus tokens by an exponential race
    (argmax r(x) / E(x)) with ONE Exp(1) vector per request shared by all its positions (as vLLM)."""

    def __init__(self, method: str = "standard") -> None:
        super().__init__(method)
        self._gen: torch.Generator | None = None

    def ragged(self, req: RaggedRequest) -> Outcome:
        self._gen = req.generator
        b, k = req.batch_size, req.max_spec_len
        u = torch.rand((b * max(k, 1),), generator=req.generator, dtype=torch.float64,
                       device=req.target_logits.device).view(b, max(k, 1)).flip(1)[:, :k]
        flat = u[torch.arange(k, device=u.device)[None, :] < torch.tensor(req.num_draft_tokens,
                                                                           device=u.device)[:, None]]
        self._noise = torch.empty(b, req.vocab_size, dtype=torch.float64,
                                  device=req.target_logits.device).exponential_(generator=req.generator)
        changed = RaggedRequest(**{**{f: getattr(req, f) for f in req.__slots__}, "uniforms": flat})
        return super().ragged(changed)

    def _corrections(self, dense: Dense, lengths: torch.Tensor, q: torch.Tensor | None,
                     residual: torch.Tensor | None = None) -> torch.Tensor:
        b = lengths.shape[0]
        corr = torch.zeros(b, dtype=torch.int64, device=lengths.device)
        rejected = (lengths < dense.n).nonzero().squeeze(1)
        bonus = (lengths >= dense.n).nonzero().squeeze(1)
        if rejected.numel():
            at = lengths[rejected]
            qa = None if q is None else q[rejected, at]
            law = self.residual(dense.p[rejected, at], qa, dense.d[rejected, at])
            corr[rejected] = (law.to(torch.float64) / self._noise[rejected]).argmax(dim=1)
        if bonus.numel():
            corr[bonus] = (self.bonus_law(dense, bonus).to(torch.float64) / self._noise[bonus]).argmax(dim=1)
        return corr


@dataclass(frozen=True)
class KernelMutant:
    """One gallery entry: how to build it, which bug class it is, and what exposes it."""

    name: str
    bug: str
    source: str
    make: Callable[[], Kernel]
    lossless: bool = False


def _make(cls: type[ReferenceChainKernel], name: str, layout: str = "ragged", method: str = "standard",
          **spec: object) -> Callable[[], Kernel]:
    def build() -> Kernel:
        return reference_kernel(layout, method, impl=cls(method), name=name, **spec)

    return build


MUTANTS: dict[str, KernelMutant] = {m.name: m for m in [
    KernelMutant("residual-from-target", "recovered token drawn from p, not norm(max(0, p - q))",
                 "the classic bug (Leviathan et al. 2211.17192, Chen et al. 2302.01318)",
                 _make(ResidualFromTarget, "residual-from-target")),
    KernelMutant("residual-unnormalised", "residual not renormalised; inverse CDF overruns to the last id",
                 "sampler handed an unnormalised residual", _make(UnnormalisedResidual, "residual-unnormalised")),
    KernelMutant("bonus-from-draft", "bonus token drawn from the last draft law q",
                 "bonus row index slip", _make(BonusFromDraft, "bonus-from-draft")),
    KernelMutant("temperature-one-side", "draft positions verified at T = 1 (bonus row tempered)",
                 "vllm#9834, TRT-LLM PR #12588", _make(TargetWithoutTemperature, "temperature-one-side")),
    KernelMutant("top-p-one-side", "top-p on the bonus row only", "sglang#10617, vllm#42744",
                 _make(TopPDraftRowsOff, "top-p-one-side")),
    KernelMutant("min-p-untempered", "min-p measured on the untempered law (before the temperature)",
                 "order slip: min-p before the temperature (vLLM applies it after); vllm#42744 (min-p at verification)",
                 _make(MinPUntempered, "min-p-untempered")),
    KernelMutant("ragged-misaligned-params", "per-request parameters expanded as if every request had k drafts",
                 "vllm#55005, vllm PR #42638, vllm-ascend#16396", _make(MisalignedExpansion, "ragged-misaligned-params")),
    KernelMutant("greedy-random-path", "greedy rows take the random path in a mixed batch",
                 "vllm PR #27077", _make(GreedyTakesRandomPath, "greedy-random-path")),
    KernelMutant("inclusive-accept", "accept when u <= ratio: u = 0 accepts a draft of probability 0",
                 "sglang#35771; transformers' inclusive <=", _make(InclusiveAccept, "inclusive-accept")),
    KernelMutant("accept-target-argmax", "accepts iff the draft is the target argmax, at T > 0",
                 "greedy verification while sampling", _make(AcceptTargetArgmax, "accept-target-argmax")),
    KernelMutant("shared-draft-residual-noise", "recovered token drawn with the acceptance uniform",
                 "flashinfer PR #424 (reused uniforms)", _make(SharedDraftResidualNoise, "shared-draft-residual-noise")),
    KernelMutant("last-tile-fallback", "u -> 1 runs past the float32 prefix sums to the padded last tile's id",
                 "GHSA-8wr5-jm2h-8r4f, sglang PR #22643", _make(LastTileFallback, "last-tile-fallback")),
    KernelMutant("padding-as-index", "the -1 padding of shorter requests used as a draft id (padded layout)",
                 "flashinfer#879", _make(PaddingAsIndex, "padding-as-index", layout="padded")),
    KernelMutant("nan-row-emits-vocab-size", "a NaN target row makes the sampler return the vocabulary size",
                 "vllm PRs #45060, #50183", _make(NanRowEmitsVocabSize, "nan-row-emits-vocab-size", nan_rows=True)),
]}

LOSSLESS: dict[str, KernelMutant] = {m.name: m for m in [
    KernelMutant("exponential-race", "other RNG order: own uniforms reversed, one Exp(1) vector per request "
                 "shared across positions", "vLLM's recovered-token sampling",
                 lambda: reference_kernel("ragged", "standard", impl=ExponentialRace(), name="exponential-race",
                                          uniforms=False), lossless=True),
    KernelMutant("one-hot-path", "no draft law: accept d with probability p(d), residual p without d",
                 "vLLM draft_probs=None (ngram)", _make(ReferenceChainKernel, "one-hot-path", method="one-hot"),
                 lossless=True),
    KernelMutant("exact-match", "draw x ~ p, accept iff x == d", "llama.cpp common_sampler_sample_and_accept_n",
                 _make(ReferenceChainKernel, "exact-match", method="exact-match"), lossless=True),
    KernelMutant("block", "block verification", "arXiv 2403.10444, vLLM rejection_sample_method='block'",
                 _make(ReferenceChainKernel, "block", method="block"), lossless=True),
    KernelMutant("padded-reference", "the reference kernel in the padded layout with -1 padding", "FlashInfer layout",
                 _make(ReferenceChainKernel, "padded-reference", layout="padded"), lossless=True),
    KernelMutant("single-reference", "the reference kernel one request at a time", "transformers layout",
                 _make(ReferenceChainKernel, "single-reference", layout="single"), lossless=True),
]}


def make(name: str) -> Kernel:
    """A gallery kernel by name (mutant or lossless variant)."""
    entry = MUTANTS.get(name) or LOSSLESS.get(name)
    if entry is None:
        raise KeyError(f"unknown kernel mutant {name!r}; known: {sorted([*MUTANTS, *LOSSLESS])}")
    return entry.make()

