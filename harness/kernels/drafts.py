"""Draft conformance: does a drafter sample its tokens from the q it returns?

Rejection sampling is exact only if the draft token was drawn from the very q handed to the
verifier. Drafters have broken this (hf#47932: candidates sampled from processed logits while
the raw ones were returned; dflash#74: the draft ignores the temperature; DeepSpec#31: tokens
from bf16, q in fp32), and a kernel check cannot see it because speceq draws the drafts itself.

Contract: ``fn(request: DraftRequest) -> (tokens [N], probs [N, V])``; the request carries draft
logits and per-row temperature / top-k / top-p, as a drafter's sampling step receives them.
speceq replicates a few templates (law families x parameters) and tests, per template:

- conformance: the tokens against the returned q. When the template's returned rows agree
  (max |difference| <= 1e-6), a chain-binomial goodness of fit against that q (exact-valid);
  otherwise the randomized PIT u = F_q(x-) + V q(x) per row (descending q order, V uniform from
  speceq's generator), exactly U(0, 1) under H0 whatever q each row has, tested by
  Anderson-Darling;
- invariants (hard failures): every returned row is a probability vector (finite, >= 0, sums to
  1 within 1e-3), every token id is in [0, V) and has positive returned probability.

The templates: law families at the kernel check's magnitudes (zipf, peaked, flat, sparse) with
temperature, top-k and top-p, and two at a real draft model's magnitudes (top logits ~36, where
bfloat16's spacing is 0.25 nats): ``bf16-tie``, two top tokens 0.006 nats apart on both sides
of a bfloat16 rounding midpoint (bfloat16 moves them 0.25 nats apart), and ``bf16-merge``, two
top tokens 0.115 nats apart that bfloat16 rounds to the same value; both over a zipf tail 3 nats
lower. A drafter that samples from rounded logits (DeepSpec#31) moves those laws by a TV of
0.06-0.09, against 3e-4 to 1.2e-3 at the other templates' magnitudes.

Holm over all conformance tests. The TV between the returned q and speceq's processed law of
the parameters is reported per template (a drafter may legitimately propose from another law;
only the mismatch between what it samples and what it returns breaks verification).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from speceq.core.defaults import DEFAULT_ALPHA
from speceq.errors import EngineError
from speceq.kernels.families import target_logits
from speceq.kernels.gof import chain_gof
from speceq.kernels.law_tests import KernelTest
from speceq.kernels.scenarios import MIN_CUT_GAP, MIN_TOP_P_MARGIN
from speceq.kernels.target_processing import RequestParams, processed_law
from speceq.stats import anderson_darling_uniform_sf, anderson_darling_uniform_statistic, holm
from speceq.verdicts.verdict import Verdict


@dataclass(frozen=True, slots=True, kw_only=True)
class DraftRequest:
    """One batch of draft sampling steps: logits ``[N, V]`` and per-row parameters (0 = greedy not used)."""

    logits: torch.Tensor  # float32 [N, V]
    temperature: torch.Tensor  # float32 [N]
    top_k: torch.Tensor  # int64 [N]; 0 = off
    top_p: torch.Tensor  # float32 [N]; 1 = off
    seeds: torch.Tensor  # int64 [N]
    generator: torch.Generator


@dataclass(frozen=True, slots=True)
class DraftCheckResult:
    """Verdict (``equivalent``: the tokens follow the returned q; or ``shifted``), tests, invariant failures,
    per-template TV to the processed law."""

    drafter: str
    verdict: Verdict
    reason: str
    tests: tuple[KernelTest, ...]
    failures: tuple[str, ...]
    processed_tv: tuple[tuple[str, float], ...]
    seconds: float

    @property
    def exit_code(self) -> int:
        return Verdict.parse(self.verdict).exit_code

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: verdict, exit code, reason, every test, the invariant failures, the processed-law TVs."""
        return {"drafter": self.drafter, "verdict": str(self.verdict), "exit_code": self.exit_code, "reason": self.reason,
                "seconds": self.seconds, "failures": list(self.failures),
                "processed_tv": [{"template": n, "tv": tv} for n, tv in self.processed_tv],
                "tests": [{**{k: getattr(t, k) for k in t.__slots__ if k != "features"}, "features": dict(t.features)}
                          for t in self.tests]}

    def summary(self) -> str:
        lines = [f"drafter {self.drafter}: {self.verdict} -- {self.reason}"]
        lines += [f"  - {f}" for f in self.failures[:8]]
        lines += [f"  - {t.summary()}" for t in self.tests if t.rejected][:8]
        moved = [(n, tv) for n, tv in self.processed_tv if tv > 0.01]
        if moved:
            lines.append("  returned q differs from the processed law of the parameters (allowed; reported): "
                         + ", ".join(f"{n} TV {tv:.2f}" for n, tv in moved[:6]))
        return "\n".join(lines)


DRAFT_TEMPLATES: tuple[tuple[str, RequestParams], ...] = (
    ("zipf", RequestParams()), ("zipf", RequestParams(0.7)), ("peaked", RequestParams(1.3)),
    ("flat", RequestParams(0.5)), ("zipf", RequestParams(1.0, top_k=8)), ("zipf", RequestParams(0.8, top_p=0.9)),
    ("sparse", RequestParams(0.6)), ("bf16-tie", RequestParams(0.7)), ("bf16-merge", RequestParams(0.5)),
)
#: A bfloat16 rounding midpoint at a real draft model's logit magnitude: 36.0 and 36.25 are
#: neighbours in bfloat16 (8 significant bits: spacing 0.25 in [32, 64)).
BF16_MIDPOINT = 36.125
#: Families of draft logits rows beyond the kernel check's (:mod:`speceq.kernels.families`).
DRAFT_FAMILIES = ("bf16-tie", "bf16-merge")


def draft_logits(family: str, vocab: int, rng: np.random.Generator) -> np.ndarray:
    """One float32 logits row of ``family``: a kernel-check family, or one of :data:`DRAFT_FAMILIES`.

    ``bf16-tie``: tokens at BF16_MIDPOINT -/+ 0.003 (bfloat16: 36.0 and 36.25); ``bf16-merge``:
    tokens at 36.005 and 36.12 (bfloat16: both 36.0); the rest a zipf row (p ~ 1 / rank) + 33.
    """
    if family not in DRAFT_FAMILIES:
        return target_logits(family, vocab, rng)
    x = target_logits("zipf", vocab, rng).astype(np.float64) + 33.0
    a, b = rng.permutation(vocab)[:2]
    if family == "bf16-tie":
        x[a], x[b] = BF16_MIDPOINT - 0.003, BF16_MIDPOINT + 0.003
    else:
        x[a], x[b] = 36.005, 36.12
    return x.astype(np.float32)


def rows_of_templates(vocab: int, rng: np.random.Generator) -> list[tuple[str, np.ndarray, RequestParams]]:
    """(name, float32 logits row, parameters) of every template, drawn as the check draws them."""
    from speceq.kernels.target_processing import cut_margins, nucleus_midpoint

    out = []
    for family, prm in DRAFT_TEMPLATES:
        for _ in range(50):
            row = draft_logits(family, vocab, rng)
            params = prm
            if prm.top_p < 1.0:
                params = RequestParams(prm.temperature, prm.top_k, nucleus_midpoint(row, prm, prm.top_p))
            m = cut_margins(row, params)
            if m.get("top_k", 1.0) >= MIN_CUT_GAP and m.get("top_p", 1.0) >= MIN_TOP_P_MARGIN:
                break
        out.append((f"{family}/{params.label()}", row, params))
    return out


def check_drafter(fn: Callable[[DraftRequest], Any], *, vocab: int = 61, replicates: int = 2000, seed: int = 0,
                  device: str | torch.device = "cpu", alpha: float = DEFAULT_ALPHA, name: str = "") -> DraftCheckResult:
    """Check that ``fn`` samples its tokens from the probabilities it returns (module docstring)."""
    start = time.perf_counter()
    dev = torch.device(device)
    rng = np.random.default_rng([seed, 11])
    rows = rows_of_templates(vocab, rng)
    label = name or getattr(fn, "__qualname__", "drafter")
    t_count = len(rows)
    table = torch.from_numpy(np.stack([r for _, r, _ in rows]).astype(np.float32)).to(dev)
    tokens_all: list[list[np.ndarray]] = [[] for _ in rows]
    probs_all: list[list[np.ndarray]] = [[] for _ in rows]
    failures: list[str] = []
    per_call = max(1, min(4096, (1 << 22) // vocab) // t_count)
    done = 0
    while done < replicates:
        take = min(per_call, replicates - done)
        slots = rng.permutation(np.repeat(np.arange(t_count), take))
        idx = torch.from_numpy(slots).to(dev)
        gen = torch.Generator(device=dev)
        gen.manual_seed(int(rng.integers(0, 2**62)))
        req = DraftRequest(
            logits=table[idx],
            temperature=torch.tensor([rows[s][2].temperature for s in slots], dtype=torch.float32, device=dev),
            top_k=torch.tensor([rows[s][2].top_k for s in slots], dtype=torch.int64, device=dev),
            top_p=torch.tensor([rows[s][2].top_p for s in slots], dtype=torch.float32, device=dev),
            seeds=torch.from_numpy(rng.integers(0, 2**62, size=slots.size)).to(dev), generator=gen)
        try:
            with torch.inference_mode():
                tok, probs = fn(req)
        except Exception as exc:
            raise EngineError(f"the drafter raised {type(exc).__name__}: {exc}", engine=label) from exc
        tok = np.asarray(tok.detach().cpu() if hasattr(tok, "detach") else tok).astype(np.int64).reshape(-1)
        probs = np.asarray(probs.detach().to(torch.float64).cpu() if hasattr(probs, "detach") else probs,
                           dtype=np.float64)
        if tok.shape != (slots.size,) or probs.shape != (slots.size, vocab):
            raise EngineError(f"expected tokens [{slots.size}] and probs [{slots.size}, {vocab}], got {tok.shape} and "
                              f"{probs.shape}", engine=label)
        for t in range(t_count):
            sel = slots == t
            tokens_all[t].append(tok[sel])
            probs_all[t].append(probs[sel])
        done += take
    tests: list[KernelTest] = []
    processed: list[tuple[str, float]] = []
    for t, (tname, row, params) in enumerate(rows):
        tok = np.concatenate(tokens_all[t])
        q = np.concatenate(probs_all[t])
        bad_rows = ~np.isfinite(q).all(axis=1) | (q.min(axis=1) < 0) | (np.abs(q.sum(axis=1) - 1.0) > 1e-3)
        bad_ids = (tok < 0) | (tok >= vocab)
        if bad_rows.any():
            failures.append(f"{tname}: {int(bad_rows.sum())} returned rows are not probability vectors "
                            f"(e.g. sum {q[bad_rows][0].sum():.6g})")
        if bad_ids.any():
            failures.append(f"{tname}: {int(bad_ids.sum())} token ids outside [0, {vocab}) (e.g. {tok[bad_ids][0]})")
        ok = ~bad_rows & ~bad_ids
        tok, q = tok[ok], q[ok]
        if tok.size == 0:
            continue
        q = q / q.sum(axis=1, keepdims=True)
        zero = q[np.arange(tok.size), tok] == 0
        if zero.any():
            failures.append(f"{tname}: {int(zero.sum())} tokens have returned probability 0 (e.g. token "
                            f"{tok[zero][0]}): the drafter did not sample from the q it returns")
        mean_q = q.mean(axis=0)
        processed.append((tname, float(0.5 * np.abs(mean_q - processed_law(row, params)).sum())))
        features = {"law": tname.split("/")[0], "temperature": f"{params.temperature:g}",
                    "top_k": str(params.top_k) if params.top_k else "off", "top_p": "on" if params.top_p < 1 else "off"}
        common = dict(scenario=f"drafts-v{vocab}", template=tname, component="draft", position=None,
                      expected_n=float(tok.size), features=features)
        if np.abs(q - mean_q).max() <= 1e-6:
            res = chain_gof(np.bincount(tok, minlength=vocab), mean_q, tv_alpha=alpha / t_count)
            tests.append(KernelTest(n=res.n, pvalue=res.pvalue, statistic=res.statistic, tv=res.tv,
                                    tv_upper=res.tv_upper_bound, tv_lower=None,
                                    support_violations=res.support_violations, **common))
        else:
            u = pit_of_rows(q, tok, rng)
            stat = anderson_darling_uniform_statistic(u)
            p = anderson_darling_uniform_sf(stat, u.size)
            tests.append(KernelTest(n=int(u.size), pvalue=float(p), statistic=float(stat), tv=float("nan"),
                                    tv_upper=float("nan"), tv_lower=None, support_violations=int(zero.sum()),
                                    **common))
    if tests:
        adjusted = holm(np.array([t.pvalue for t in tests]))
        tests = [KernelTest(**{**{k: getattr(t, k) for k in t.__slots__}, "holm": float(a),
                               "rejected": bool(a <= alpha)}) for t, a in zip(tests, adjusted)]
    rejected = [t for t in tests if t.rejected]
    if failures or rejected:
        verdict = Verdict.SHIFTED
        reason = (f"the drafter's tokens are not drawn from the q it returns: {len(rejected)} of {len(tests)} "
                  f"templates reject at the Holm level {alpha:g}" + (f"; {len(failures)} hard failures" if failures
                                                                       else ""))
    else:
        verdict = Verdict.EQUIVALENT
        reason = f"tokens follow the returned q on all {len(tests)} templates (Holm level {alpha:g})"
    return DraftCheckResult(drafter=label, verdict=verdict, reason=reason, tests=tuple(tests),
                            failures=tuple(failures), processed_tv=tuple(processed), seconds=time.perf_counter() - start)


def pit_of_rows(q: np.ndarray, tok: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Randomized PIT of each token under its own row (tokens ordered by descending q, ties by id)."""
    order = np.argsort(-q, axis=1, kind="stable")
    rank = np.argsort(order, axis=1)
    sorted_q = np.take_along_axis(q, order, axis=1)
    before = np.cumsum(sorted_q, axis=1) - sorted_q
    r = rank[np.arange(tok.size), tok]
    return np.clip(before[np.arange(tok.size), r] + rng.random(tok.size) * sorted_q[np.arange(tok.size), r], 0.0, 1.0)


# ---- reference drafters (a correct one and the gallery's drafter bugs) ------------------------------
def _processed(req: DraftRequest) -> torch.Tensor:
    from speceq.kernels.reference_kernels import ReferenceChainKernel

    return ReferenceChainKernel.process(req.logits, req.temperature, req.top_k, req.top_p)


def conforming_drafter(req: DraftRequest) -> tuple[torch.Tensor, torch.Tensor]:
    """Samples from the processed law and returns it (correct)."""
    q = _processed(req)
    return torch.multinomial(q, 1, generator=req.generator).squeeze(1), q


def returns_raw_q_drafter(req: DraftRequest) -> tuple[torch.Tensor, torch.Tensor]:
    """BUG (hf#47932): samples from the processed law, returns softmax of the raw logits."""
    tok = torch.multinomial(_processed(req), 1, generator=req.generator).squeeze(1)
    return tok, torch.softmax(req.logits.to(torch.float32), dim=1)


def ignores_temperature_drafter(req: DraftRequest) -> tuple[torch.Tensor, torch.Tensor]:
    """BUG (dflash#74): samples at temperature 1, returns the tempered law."""
    raw = torch.softmax(req.logits.to(torch.float32), dim=1)
    return torch.multinomial(raw, 1, generator=req.generator).squeeze(1), _processed(req)


def bf16_sampling_drafter(req: DraftRequest) -> tuple[torch.Tensor, torch.Tensor]:
    """BUG (DeepSpec#31): samples from bf16 logits, returns the float32 law."""
    low = DraftRequest(logits=req.logits.to(torch.bfloat16).to(torch.float32), temperature=req.temperature,
                       top_k=req.top_k, top_p=req.top_p, seeds=req.seeds, generator=req.generator)
    return torch.multinomial(_processed(low), 1, generator=req.generator).squeeze(1), _processed(req)


DRAFTERS: dict[str, tuple[Callable[[DraftRequest], Any], bool, str]] = {
    "conforming": (conforming_drafter, True, "samples from the processed law and returns it"),
    "returns-raw-q": (returns_raw_q_drafter, False, "hf#47932: samples processed logits, returns raw ones"),
    "ignores-temperature": (ignores_temperature_drafter, False, "dflash#74: the draft ignores the temperature"),
    "bf16-sampling": (bf16_sampling_drafter, False, "DeepSpec#31: tokens from bf16 logits, q in float32"),
}
