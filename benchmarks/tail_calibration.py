"""Tail calibration of every primary test at the levels it is compared at (1e-3, 1e-4).

Under H0 a valid test rejects at level a with probability at most a. Holm compares the
primary tests of a run at alpha / m ... alpha (about 2e-5 to 1e-3 at the defaults), so this
script measures the size of each test there, with R >= 10^5 null draws of the statistic per
(test, law), vectorised (the per-replicate binning of the chi-square tests is reproduced in
numpy and checked against :func:`speceq.stats.chisquare_homogeneity` on the first draws).
A size passes when it is below the one-sided 3-sigma band a + 3 sqrt(a (1 - a) / R).

Laws (:func:`bundled_laws`, :func:`synthetic_laws`, :func:`bpe_laws`): first-token and
conditional laws of the bundled target at T = 0.3, 0.7, 1.0, a sparse law over 32 000 labels,
a peaked law (top-1 0.99), the length law of an EOS-prone case (EOS probability 0.3 per step,
6 tokens), and first-token laws of the 32 000-token BPE target.
Other laws plug in through the ``laws`` argument of :func:`calibration_table` (a function
returning :class:`Law` objects, e.g. the next-token laws of a 32k-vocabulary BPE model;
``benchmarks/request_fields_calibration.py`` passes the laws of the request-field and grammar oracle paths).

The pipeline-level A/A check (:func:`pipeline_aa`) runs the whole analysis and decision
(:func:`speceq.pipeline.analysis.analyse_run`, with an exact oracle) on A/A runs of a Markov model
built from the bundled target, and reports the run-level false-``shifted`` rate against alpha.

Usage::

    python benchmarks/tail_calibration.py                 # R = 100 000 per cell: over an hour on 1 core
    python benchmarks/tail_calibration.py --reps 20000    # quicker, coarser
    python benchmarks/tail_calibration.py --laws bpe --tests homogeneity --only "prompt 0"   # one part

The costly cells are those whose p-values come from Monte Carlo (the unequal-group chi-square
tail, ~200 s per bundled law at R = 10^5; the sparse law's tiny tables); the 32k laws are
drawn over their keepable labels plus one lump (:func:`lump_unkeepable`).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as sps

from speceq import stats
from speceq.stats.martingale import MIN_EFFECTIVE_JUMPS
from speceq.stats.scores import DRAFT_RATIO_CAP
from speceq.stats.sequential import scale_free_mixture_log_e
from speceq.stats.synthetic import sample_categorical

LEVELS = (1e-3, 1e-4)
#: The test families of the table.
TESTS = ("homogeneity", "gof", "martingale", "pit")
LAW_GROUPS = ("bundled", "synthetic", "bpe", "pipeline")
_CHUNK_CELLS = 20_000_000


@dataclass(frozen=True)
class Law:
    """A categorical law to calibrate on.

    probs: the law (sums to 1) for the count tests. contexts: ``[C, V]`` next-token laws
    along generated text, for the martingale tests (None: not used there); draft_contexts:
    the draft's laws at the same prefixes (draft drift). kind: ``"token"`` or ``"length"``.
    """

    name: str
    probs: np.ndarray
    contexts: np.ndarray | None = None
    draft_contexts: np.ndarray | None = None
    kind: str = "token"


# ---------------------------------------------------------------------------------- laws
def bundled_laws(temperatures: Sequence[float] = (0.3, 0.7, 1.0), prompts: int = 2, depth: int = 8,
                 streams: int = 8, seed: int = 0) -> list[Law]:
    """First-token and conditional laws of the bundled target (and draft) at each temperature."""
    import torch

    torch.set_num_threads(1)
    from speceq.core.params import SamplingParams
    from speceq.models import load_draft
    from speceq.models.prompts import DEFAULT_PROMPTS
    from speceq.models.tokenizer import ByteTokenizer
    from speceq.oracles.hf import TargetOracle

    tok = ByteTokenizer()
    target = TargetOracle()
    draft = TargetOracle(load_draft())
    rng = np.random.default_rng(seed)
    out = []
    for T in temperatures:
        params = SamplingParams(temperature=T, max_new_tokens=depth)
        ids = [tok.encode(p) for p in DEFAULT_PROMPTS[:prompts]]
        first = target.next_token_probs(ids, params).astype(np.float64)
        prefixes = [list(i) for i in ids for _ in range(streams)]
        ctx, dctx = [], []
        for _ in range(depth):
            p = target.next_token_probs(prefixes, params).astype(np.float64)
            q = draft.next_token_probs(prefixes, params).astype(np.float64)
            p /= p.sum(axis=1, keepdims=True)
            ctx.append(p)
            dctx.append(q / q.sum(axis=1, keepdims=True))
            nxt = sample_categorical(p, rng)
            prefixes = [pre + [int(x)] for pre, x in zip(prefixes, nxt)]
        contexts, draft_contexts = np.concatenate(ctx), np.concatenate(dctx)
        for j in range(prompts):
            out.append(Law(f"target T={T} first token, prompt {j}", first[j] / first[j].sum(), contexts, draft_contexts))
        cond = ctx[1][0]  # the law after the first sampled token of prompt 0's first stream
        out.append(Law(f"target T={T} conditional (position 1)", cond))
    return out


def synthetic_laws(seed: int = 0) -> list[Law]:
    """A sparse law over 32 000 labels, a peaked law, and the length law of an EOS-prone case."""
    rng = np.random.default_rng(seed)
    sparse = rng.dirichlet(np.full(32_000, 0.02))
    sparse = np.where(sparse >= 1e-7, sparse, 0.0)  # labels below 1e-7 are never drawn at these sizes
    sparse /= sparse.sum()
    peaked = np.full(259, 0.01 / 258)
    peaked[65] = 0.99
    eos, steps = 0.3, 6  # P(EOS) per step; lengths 1..6 (6 = cut at max_new_tokens)
    lengths = np.array([(1 - eos) ** (k - 1) * eos for k in range(1, steps)] + [(1 - eos) ** (steps - 1)])
    return [Law("sparse, V=32000 Dirichlet(0.02)", sparse), Law("peaked, top-1 0.99", peaked),
            Law("EOS-prone lengths, 6 tokens", lengths, kind="length")]


#: The BPE laws calibrated by default: (prompt index in the world's prompts + EOS prompts, temperature).
BPE_CHOICES = ((0, 1.0), (0, 0.7), (3, 1.0), (6, 0.7))


def bpe_laws(choices: Sequence[tuple[int, float]] = BPE_CHOICES) -> list[Law]:
    """First-token laws of the 32 000-token BPE target (:func:`speceq.models.bpe.first_token_laws`).

    Real-vocabulary laws: every one of the 32 000 tokens has p > 0, a few hundred expect at
    least one draw in 3 000, most are seen once or never.
    """
    import torch

    torch.set_num_threads(1)
    from speceq.models.bpe import BPE_EOS_PROMPTS, BPE_PROMPTS, first_token_laws

    prompts = [*BPE_PROMPTS, *BPE_EOS_PROMPTS]
    laws = first_token_laws(prompts=[prompts[i] for i, _ in choices], temperatures=(1.0, 0.7))
    return [Law(f"BPE 32k T={t} first token, prompt {i}", laws[(prompts[i], t)]) for i, t in choices]


def pipeline_laws() -> list[Law]:
    """Laws of the joint first-2 symbols of the two Markov models of :func:`pipeline_aa`.

    The pair (x1, x2) has probability init[x1] trans[x1, x2]; a row whose first token is EOS
    is the pair (EOS, END). About 67 000 labels, most of them rare: the law of the
    ``chi2 joint first 2`` test of the pipeline A/A (run it with ``--pairs 1000+1000``).
    """
    from speceq.models import EOS_ID

    laws = []
    for boost, name in ((0.3, "EOS-prone"), (0.0, "plain")):
        init, trans = markov_model(1.0, eos_boost=boost)
        pair = init[:, None] * trans
        ends_first = pair[EOS_ID].sum()
        pair[EOS_ID] = 0.0
        probs = np.r_[pair.ravel(), ends_first]
        laws.append(Law(f"pipeline A/A Markov model, {name}, joint first 2 (pairs)", probs / probs.sum()))
    return laws


def default_laws() -> list[Law]:
    return bundled_laws() + synthetic_laws() + bpe_laws()


# ------------------------------------------------------------------ vectorised null draws
def homogeneity_null_pvalues(p: np.ndarray, n_a: int, n_b: int, reps: int, rng: np.random.Generator,
                             check: int = 50, mc_level: float = 1e-4) -> np.ndarray:
    """p-values of :func:`chisquare_homogeneity` on ``reps`` pairs of samples of the same law.

    The pooled-count binning is reproduced per replicate (threshold 5 n / min(n_a, n_b), the
    small merged bin folded into the smallest kept bin); replicates with fewer than 2 bins, and
    (unequal groups) those whose chi-square p-value the function recomputes by conditional
    Monte Carlo, call the real function (with ``mc_level``). The first ``check`` replicates
    are compared with it.
    """
    from speceq.stats.twosample import unequal_tail_needs_mc

    p = p[p > 0] / p[p > 0].sum()
    n = n_a + n_b
    thr = max(10.0, 5.0 * n / min(n_a, n_b))
    p, lumped = lump_unkeepable(p, n, thr)
    out = np.empty(reps)
    chunk = max(1, _CHUNK_CELLS // (2 * p.size))
    done = 0
    while done < reps:
        size = min(chunk, reps - done)
        a = rng.multinomial(n_a, p, size=size)
        b = rng.multinomial(n_b, p, size=size)
        m = a + b
        kept = m >= thr
        if lumped is not None:
            kept[:, -1] = False  # the lump holds labels that never keep a bin of their own
        rare = (m > 0) & ~kept
        rare_m = np.where(rare, m, 0).sum(axis=1)
        rare_a = np.where(rare, a, 0).sum(axis=1)
        n_kept = kept.sum(axis=1)
        fold = (rare_m > 0) & (n_kept > 0) & (rare_m < thr)
        own = (rare_m > 0) & ~fold
        cell_a = np.where(kept, a, 0).astype(np.float64)
        cell_m = np.where(kept, m, 0).astype(np.float64)
        rows = np.flatnonzero(fold)
        if rows.size:
            smallest = np.argmin(np.where(kept[rows], m[rows], np.iinfo(np.int64).max), axis=1)
            cell_a[rows, smallest] += rare_a[rows]
            cell_m[rows, smallest] += rare_m[rows]
        with np.errstate(divide="ignore", invalid="ignore"):
            dev = cell_a - cell_m * (n_a / n)
            x2 = np.where(cell_m > 0, dev * dev / np.where(cell_m > 0, cell_m, 1.0), 0.0).sum(axis=1)
            rdev = rare_a - rare_m * (n_a / n)
            x2 += np.where(own, rdev * rdev / np.where(rare_m > 0, rare_m, 1.0), 0.0)
        x2 *= n * n / (n_a * n_b)
        k = n_kept + own
        pv = np.where(k >= 2, sps.chi2.sf(x2, np.maximum(k - 1, 1)), np.nan)
        redo = k < 2
        if n_a != n_b:
            redo |= np.array([unequal_tail_needs_mc(float(x), mc_level) for x in pv])
        for r in np.flatnonzero(redo):
            pv[r] = stats.chisquare_homogeneity(_unlump(a[r], lumped, rng), _unlump(b[r], lumped, rng), rng=rng,
                                                mc_level=mc_level).pvalue
        for r in range(min(check - done, size) if done < check else 0):
            real = stats.chisquare_homogeneity(_unlump(a[r], lumped, rng), _unlump(b[r], lumped, rng),
                                               rng=np.random.default_rng(r), mc_level=mc_level).pvalue
            if not redo[r] and not math.isclose(real, pv[r], rel_tol=1e-9, abs_tol=1e-300):
                raise AssertionError(f"vectorised homogeneity p {pv[r]} != chisquare_homogeneity p {real}")
        out[done: done + size] = pv
        done += size
    return out


#: Labels whose pooled count reaches the keep threshold with probability below this are lumped.
LUMP_PROBABILITY = 1e-13


def lump_unkeepable(p: np.ndarray, n: int, threshold: float) -> tuple[np.ndarray, np.ndarray | None]:
    """Merge the labels that (almost) never get a bin of their own into one label, for speed.

    A label keeps a bin only when its pooled count reaches ``threshold``; a label with
    P(Binomial(n, p) >= threshold) < LUMP_PROBABILITY (per replicate) never does in practice
    (over 32 000 labels and 10^5 replicates the expected number of exceptions is < 1e-3), and
    then it only counts toward the merged bin, whose total is the same when such labels are
    drawn as one. So a 32k law with a few hundred keepable labels is drawn over those plus one
    lump (the last label): the p-values are those of the unlumped draws except on such an
    exception. Returns the lumped law and the lumped labels' law (None: nothing lumped); a
    replicate that needs per-label counts splits the lump by a multinomial draw of that law.
    """
    can_keep = sps.binom.sf(math.ceil(threshold) - 1, n, p) >= LUMP_PROBABILITY
    if can_keep.all() or (~can_keep).sum() < 2:
        return p, None
    inside = p[~can_keep]
    return np.append(p[can_keep], inside.sum()), inside / inside.sum()


def _unlump(counts: np.ndarray, inside: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
    """Per-label counts of one lumped replicate: the lump (last entry) split by a multinomial of ``inside``."""
    if inside is None:
        return counts
    return np.concatenate([counts[:-1], rng.multinomial(int(counts[-1]), inside)])


def gof_null_pvalues(p: np.ndarray, n: int, reps: int, rng: np.random.Generator, mc_level: float = 1e-4) -> np.ndarray:
    """p-values of :func:`chisquare_gof` for ``reps`` samples of size n from p itself.

    The bins depend on (p, n) only, so bin counts are drawn directly (multinomial of the bin
    probabilities). Where the function uses the chi-square law (every bin expects >= 20 and
    p >= 0.01) the p-value is vectorised; the other replicates call the function itself on
    the bin counts (exact binomial, or Monte Carlo under the known law).
    """
    from speceq.stats.goodness import ASYMPTOTIC_P_FLOOR, DEFAULT_MIN_EXPECTED

    p = p / p.sum()
    bins = stats.probability_bins(p, n)
    used = bins >= 0
    k = int(bins.max()) + 1
    if k < 2:
        return np.ones(reps)
    bin_p = np.bincount(bins[used], weights=p[used], minlength=k)
    bin_p /= bin_p.sum()
    if np.unique(stats.probability_bins(bin_p, n)).size != k:
        raise AssertionError("re-binning the bin law changed the bins; cannot draw bin counts directly")
    expected = n * bin_p
    out = np.empty(reps)
    chunk = max(1, _CHUNK_CELLS // k)
    for s in range(0, reps, chunk):
        t = rng.multinomial(n, bin_p, size=min(chunk, reps - s))
        pv = sps.chi2.sf(((t - expected) ** 2 / expected).sum(axis=1), k - 1)
        redo = np.flatnonzero(pv < ASYMPTOTIC_P_FLOOR) if expected.min() >= DEFAULT_MIN_EXPECTED else np.arange(t.shape[0])
        for r in redo:
            pv[r] = stats.chisquare_gof(t[r], bin_p, rng=rng, mc_level=mc_level).pvalue
        out[s: s + t.shape[0]] = pv
    return out


def martingale_null_pvalues(contexts: np.ndarray, n_tokens: int, reps: int, rng: np.random.Generator,
                            draft_contexts: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """p-values of the martingale z-tests over ``n_tokens`` tokens, each at a random context.

    Returns test name -> p-values for argmax leak, temperature drift and (with draft laws)
    draft drift and the bounded draft ratio, all on the same draws. Contexts are chosen
    independently of the past, so the increments are martingale differences; the validity
    condition (effective jumps < 30: the e-process p-value) applies, with the predictable
    fourth moments (observed ones for the draft drift, as the function does without them).
    """
    P = contexts / contexts.sum(axis=1, keepdims=True)
    C, V = P.shape
    with np.errstate(divide="ignore"):
        logp = np.where(P > 0, np.log(np.where(P > 0, P, 1.0)), 0.0)
    fs: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]] = {}

    def moments(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        mu = (P * values).sum(axis=1)
        dev = values - mu[:, None]
        return mu, np.maximum((P * dev**2).sum(axis=1), 0.0), (P * dev**4).sum(axis=1)

    top = np.zeros_like(P)
    top[np.arange(C), P.argmax(axis=1)] = 1.0
    fs["z argmax leak"] = (top, *moments(top))
    fs["z temperature drift"] = (logp, *moments(logp))
    if draft_contexts is not None:
        Qraw = draft_contexts / draft_contexts.sum(axis=1, keepdims=True)
        llr = np.log(np.maximum(Qraw, 1e-30)) - logp
        fs["z draft drift"] = (llr, *moments(llr)[:2], None)
        from speceq.stats.synthetic import draft_ratio_fields

        ratio = draft_ratio_fields(P, Qraw, np.zeros(C, dtype=np.int64))
        with np.errstate(divide="ignore", invalid="ignore"):
            rvals = np.where(P > 0, np.minimum(Qraw / np.where(P > 0, P, 1.0), DRAFT_RATIO_CAP),
                             DRAFT_RATIO_CAP)
        fs["z draft ratio"] = (rvals, ratio["draft_ratio_mean"], ratio["draft_ratio_var"], ratio["draft_ratio_m4"])
    # inverse CDF of every context at once: context c's CDF shifted to (c, c + 1]
    cdf = np.cumsum(P, axis=1)
    cdf /= cdf[:, -1:]
    flat = (cdf + np.arange(C)[:, None]).ravel()
    out = {name: np.empty(reps) for name in fs}
    chunk = max(1, 4_000_000 // n_tokens)
    for s in range(0, reps, chunk):
        size = min(chunk, reps - s)
        ctx = rng.integers(0, C, size=(size, n_tokens))
        idx = np.searchsorted(flat, ctx + rng.random((size, n_tokens)), side="right")
        tok = np.clip(idx - ctx * V, 0, V - 1)
        for name, (values, mu, var, m4) in fs.items():
            dev = values[ctx, tok] - mu[ctx]
            total = np.maximum(var[ctx].sum(axis=1), 1e-300)
            z = dev.sum(axis=1) / np.sqrt(total)
            p = skew_corrected_pvalues(z, (dev**3).sum(axis=1) / total**1.5)
            fourth = (dev**4 if m4 is None else m4[ctx]).sum(axis=1)
            guard = total * total < MIN_EFFECTIVE_JUMPS * fourth
            if guard.any():
                top_e = scale_free_mixture_log_e(dev[guard], var[ctx[guard]]).max(axis=1)
                p[guard] = np.minimum(1.0, np.exp(-np.maximum(0.0, top_e)))
            out[name][s: s + size] = p
            if s == 0:  # the vectorised p-value is the function's
                for r in range(min(5, size)):
                    real = stats.martingale_z(values[ctx[r], tok[r]], mu[ctx[r]], var[ctx[r]], name=name,
                                              fourth_moment=None if m4 is None else m4[ctx[r]]).pvalue
                    if not math.isclose(real, out[name][r], rel_tol=1e-6, abs_tol=1e-12):
                        raise AssertionError(f"vectorised {name} p {out[name][r]} != martingale_z p {real}")
    return out


def skew_corrected_pvalues(z: np.ndarray, skewness: np.ndarray) -> np.ndarray:
    """Vectorised :func:`speceq.stats.martingale.skew_corrected_pvalue`."""
    normal = sps.norm.sf(np.abs(z))
    correction = sps.norm.pdf(z) * skewness * (z * z - 1.0) / 6.0
    tail = np.where(z >= 0, normal + correction, normal - correction)
    return np.minimum(1.0, 2.0 * np.maximum(tail, normal))


def pit_ad_null_pvalues(n_tokens: int, reps: int, rng: np.random.Generator) -> np.ndarray:
    """p-values of the PIT Anderson-Darling test: randomized PIT values are exactly U(0, 1) under H0."""
    out = np.empty(reps)
    chunk = max(1, 5_000_000 // n_tokens)
    w = 2.0 * np.arange(1, n_tokens + 1) - 1.0
    for s in range(0, reps, chunk):
        u = np.sort(rng.random((min(chunk, reps - s), n_tokens)), axis=1)
        a2 = -n_tokens - (w * (np.log(u) + np.log1p(-u[:, ::-1]))).sum(axis=1) / n_tokens
        out[s: s + u.shape[0]] = [stats.anderson_darling_uniform_sf(float(x), n_tokens) for x in a2]
    return out


# ------------------------------------------------------------------------------- table
@dataclass(frozen=True)
class SizeRow:
    test: str
    law: str
    level: float
    reps: int
    rejections: int

    @property
    def size(self) -> float:
        return self.rejections / self.reps

    @property
    def band(self) -> float:
        return self.level + 3.0 * math.sqrt(self.level * (1 - self.level) / self.reps)

    @property
    def ok(self) -> bool:
        return self.size <= self.band


def _rows(test: str, law: str, pvalues: np.ndarray, levels: Sequence[float]) -> list[SizeRow]:
    return [SizeRow(test, law, a, pvalues.size, int(np.count_nonzero(pvalues <= a))) for a in levels]


def calibration_table(laws: Callable[[], Sequence[Law]] = default_laws, reps: int = 100_000, seed: int = 0,
                      levels: Sequence[float] = LEVELS, tokens: Sequence[int] = (300, 1200),
                      progress: Callable[[str], None] | None = None,
                      emit: Callable[[list[SizeRow]], None] | None = None,
                      pairs: Sequence[tuple[int, int]] = ((3000, 3000), (3000, 600)),
                      tests: Sequence[str] = TESTS) -> list[SizeRow]:
    """Measured size of every primary test on every law, at every level (``emit`` gets each block).

    ``pairs``: group sizes of the two-sample tests; ``tests``: which of :data:`TESTS` to run.
    """
    rows: list[SizeRow] = []
    emitted = 0

    def flush() -> None:
        nonlocal emitted
        if emit and len(rows) > emitted:
            emit(rows[emitted:])
        emitted = len(rows)
    seeds = iter(np.random.SeedSequence(seed).spawn(10_000))

    def say(msg: str) -> None:
        if progress:
            progress(msg)

    all_laws = list(laws())
    for law in all_laws:
        say(law.name)
        name = "chi2 length" if law.kind == "length" else "chi2 homogeneity (position / joint)"
        for n_a, n_b in pairs if "homogeneity" in tests else ():
            pv = homogeneity_null_pvalues(law.probs, n_a, n_b, reps, np.random.default_rng(next(seeds)))
            rows += _rows(f"{name}, n={n_a}+{n_b}", law.name, pv, levels)
        if law.kind == "token" and "gof" in tests:
            pv = gof_null_pvalues(law.probs, 3000, reps, np.random.default_rng(next(seeds)))
            rows += _rows("chi2 GOF first token, n=3000", law.name, pv, levels)
        flush()
    seen: set[int] = set()
    for law in all_laws if "martingale" in tests else ():
        if law.contexts is None or id(law.contexts) in seen:
            continue
        seen.add(id(law.contexts))
        label = law.name.split(" first")[0] + " conditional laws"
        for n in tokens:
            say(f"{label}, {n} tokens")
            pvs = martingale_null_pvalues(law.contexts, n, reps, np.random.default_rng(next(seeds)), law.draft_contexts)
            for test, pv in pvs.items():
                rows += _rows(f"{test}, N={n}", label, pv, levels)
            flush()
    for n in tokens if "pit" in tests else ():
        say(f"PIT AD, {n} tokens")
        rows += _rows(f"PIT Anderson-Darling, N={n}", "any (PIT is U(0,1))",
                      pit_ad_null_pvalues(n, reps, np.random.default_rng(next(seeds))), levels)
        flush()
    return rows


HEADER = ("| test | law | level | R | measured size | size / nominal | 3-sigma band | ok |\n"
          "|---|---|---|---|---|---|---|---|")


def format_table(rows: Sequence[SizeRow], header: bool = True) -> str:
    lines = [HEADER] if header else []
    for r in rows:
        lines.append(f"| {r.test} | {r.law} | {r.level:g} | {r.reps} | {r.size:.2e} | {r.size / r.level:.2f} | "
                     f"{r.band:.2e} | {'yes' if r.ok else 'NO'} |")
    return "\n".join(lines)


# -------------------------------------------------------------------- pipeline-level A/A
class MarkovOracle:
    """Exact oracle of first-order Markov models, one per prompt (chosen by the prompt's first id).

    models: first prompt id -> (initial law, transition matrix); position 0 follows the
    initial law, later positions ``transition[previous token]``.
    """

    vocab_size = 259
    #: most distinct laws a model may have to be scored from a table (:meth:`_table`)
    TABLE_LAWS = 64
    eos_token_id = None
    has_draft = False

    def knows_full_law(self, params) -> bool:
        return True

    def __init__(self, models: dict[int, tuple[np.ndarray, np.ndarray]]) -> None:
        self.models = models
        self._tables: dict[int, tuple[np.ndarray, np.ndarray, Any]] = {}

    def _table(self, first_id: int) -> tuple[np.ndarray, np.ndarray, Any]:
        """Every token's scores under every distinct law of one model, computed once.

        A Markov law depends only on (position 0, previous token), and the models of
        :func:`markov_model` have few distinct rows (the initial law and about 40 head
        transitions), so the scores of a batch are a gather from this table; each table row is
        ``scores_from_probs`` of that law and token, the same numbers as scoring row by row.
        Returns (law index of position 0, law index per previous token, table of scores).
        Models with more than ``TABLE_LAWS`` distinct rows (the tests' dense random models) are
        not tabulated: they return None and are scored row by row.
        """
        if first_id not in self._tables:
            from speceq.stats.synthetic import scores_from_probs

            init, trans = self.models[first_id]
            laws, inverse = np.unique(np.vstack([init[None, :], trans]), axis=0, return_inverse=True)
            inverse = np.asarray(inverse).reshape(-1)
            v = laws.shape[1]
            table = (scores_from_probs(np.repeat(laws, v, axis=0), np.tile(np.arange(v), laws.shape[0]))
                     if laws.shape[0] <= self.TABLE_LAWS else None)
            self._tables[first_id] = (inverse[0], inverse[1:], table)
        return self._tables[first_id]

    def describe(self) -> dict:
        return {"model": "exact Markov oracle"}

    def next_token_probs(self, prefixes, params) -> np.ndarray:
        return np.stack([self.models[int(pre[0])][0] for pre in prefixes])

    def raw_top2_margin(self, prefixes) -> np.ndarray:
        return np.full(len(prefixes), 5.0)

    def score(self, prompts, batch, params):
        from speceq.stats.scores import TokenScores

        first, after, table = self._table(int(prompts[0][0]))
        inside = np.arange(batch.tokens.shape[1])[None, :] < batch.lengths[:, None]
        rows, pos = np.nonzero(inside)
        tok = batch.tokens[rows, pos]
        prev = np.where(pos > 0, batch.tokens[rows, np.maximum(pos - 1, 0)], 0)
        if table is None:
            from speceq.stats.synthetic import scores_from_probs

            init, trans = self.models[int(prompts[0][0])]
            table = scores_from_probs(np.where((pos > 0)[:, None], trans[prev], init[None, :]), tok)
            at = np.arange(tok.size)
        else:
            at = np.where(pos > 0, after[prev], first) * self.vocab_size + tok
        fields = {f: (None if getattr(table, f) is None else getattr(table, f)[at]) for f in table.__dataclass_fields__}
        return TokenScores(**{**fields, "row": rows.astype(np.int64), "position": pos.astype(np.int64)})


def markov_model(T: float = 1.0, eos_boost: float = 0.0, top: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """Markov model from the bundled target: initial law after a prompt, transitions after prompt + x."""
    import torch

    torch.set_num_threads(1)
    from speceq.core.params import SamplingParams
    from speceq.models import EOS_ID
    from speceq.models.prompts import DEFAULT_PROMPTS
    from speceq.models.tokenizer import ByteTokenizer
    from speceq.oracles.hf import TargetOracle

    tok = ByteTokenizer()
    oracle = TargetOracle()
    params = SamplingParams(temperature=T)
    ids = tok.encode(DEFAULT_PROMPTS[0])
    init = oracle.next_token_probs([ids], params)[0].astype(np.float64)
    init /= init.sum()
    trans = np.tile(init, (init.size, 1))
    heads = np.argsort(-init)[:top]
    trans[heads] = oracle.next_token_probs([ids + [int(x)] for x in heads], params).astype(np.float64)
    if eos_boost:
        trans *= 1 - eos_boost
        trans[:, EOS_ID] += eos_boost
    trans /= trans.sum(axis=1, keepdims=True)
    return init, trans


def pipeline_aa(runs: int, samples: int, alphas: Sequence[float], seed: int = 0, eos_boost: float = 0.3,
                progress: Callable[[str], None] | None = None,
                models: Callable[[float], tuple[np.ndarray, np.ndarray]] | None = None,
                fired: list[tuple[int, float, str, str, float, float]] | None = None,
                results: list[Any] | None = None) -> dict[float, tuple[int, int]]:
    """Run-level false-``shifted`` count per alpha over A/A runs of the whole analysis + decision.

    Each run has two cases of Markov models from the bundled target (T = 1.0 plain, and
    EOS-prone: EOS probability ``eos_boost`` per step), 4 new tokens, baseline and candidate
    drawn independently from the same model, the exact oracle, Holm over the run. Returns alpha -> (runs with any shifted case, runs).
    ``fired``: when given, each false ``shifted`` appends (run, alpha, case, the primary test with the
    smallest Holm-adjusted p-value, its raw p-value, its adjusted p-value; a run-level pooled test
    is named with the case id ``POOLED_CASE_ID``). ``results``: when
    given, every run's RunResult is appended (run order, then alpha order).
    """
    from speceq.core.params import SamplingParams
    from speceq.engines.base import SampleBatch
    from speceq.inputs.cases import Case
    from speceq.models import EOS_ID
    from speceq.pipeline.analysis import analyse_run
    from speceq.stats.calibration import toy_sequences
    from speceq.verdicts.result import POOLED_CASE_ID

    make = models or (lambda boost: markov_model(1.0, eos_boost=boost))
    models = {100: make(0.0), 102: make(eos_boost)}
    cases = [Case(case_id=f"markov-{k}", prompt_ids=(k, k + 1), params=SamplingParams(max_new_tokens=4)) for k in models]
    oracle = MarkovOracle(models)
    counts = {a: 0 for a in alphas}
    rng = np.random.default_rng(seed)

    def batch(init: np.ndarray, trans: np.ndarray) -> SampleBatch:
        t, lens = toy_sequences(rng, init, trans, samples, 4, eos=EOS_ID)
        return SampleBatch(tokens=t, lengths=lens, prompt_index=np.zeros(samples, dtype=np.int64))

    for r in range(runs):
        base = {c.case_id: batch(*models[c.prompt_ids[0]]) for c in cases}
        cand = {c.case_id: batch(*models[c.prompt_ids[0]]) for c in cases}
        for a in alphas:
            res = analyse_run(cases, base, cand, oracle=oracle, alpha=a, tolerance=0.15, seed=r, engines={},
                              provenance={})
            counts[a] += res.verdict == "shifted"
            if results is not None:
                results.append(res)
            if fired is not None and res.verdict == "shifted":
                tests = [(c.case_id, t) for c in res.cases for t in c.tests]
                tests += [(POOLED_CASE_ID, t) for t in res.pooled_tests]
                case_id, test = min(((c, t) for c, t in tests if t.adjusted_pvalue is not None),
                                    key=lambda ct: ct[1].adjusted_pvalue)
                fired.append((r, a, case_id, test.name, test.pvalue, test.adjusted_pvalue))
        if progress and (r + 1) % 50 == 0:
            progress(f"pipeline A/A: {r + 1}/{runs} runs")
    return {a: (counts[a], runs) for a in alphas}


def format_aa_table(aa: dict[float, tuple[int, int]]) -> str:
    """Markdown table of :func:`pipeline_aa`'s counts: rate, rate / alpha, one-sided 3-sigma band, binomial p.

    The binomial p-value is P(X >= k) for X ~ Binomial(runs, alpha): small means more false
    ``shifted`` runs than a valid alpha-level decision gives.
    """
    lines = ["\n| alpha | runs | runs with a false `shifted` | rate | rate / alpha | 3-sigma band | P(X >= k) at alpha | ok |",
             "|---|---|---|---|---|---|---|---|"]
    for a, (k, n) in aa.items():
        band = a + 3 * math.sqrt(a * (1 - a) / n)
        tail = float(sps.binom.sf(k - 1, n, a))
        lines.append(f"| {a:g} | {n} | {k} | {k / n:.4f} | {k / n / a:.2f} | {band:.4f} | {tail:.2f} | "
                     f"{'yes' if k / n <= band else 'NO'} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, laws: Callable[[], Sequence[Law]] = default_laws) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=100_000,
                    help="null draws per (test, law); 0: no table, only the pipeline A/A. Default: %(default)s")
    ap.add_argument("--aa-runs", type=int, default=1000, help="pipeline A/A runs. Default: %(default)s")
    ap.add_argument("--aa-samples", type=int, default=1000, help="samples per engine in each A/A case. Default: %(default)s")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--synthetic-only", action="store_true", help="skip the bundled-model laws (no torch)")
    ap.add_argument("--laws", default=",".join(LAW_GROUPS[:3]),
                    help=f"law groups, comma-separated, of: {', '.join(LAW_GROUPS)}. Default: %(default)s")
    ap.add_argument("--tests", default=",".join(TESTS),
                    help=f"test families, comma-separated, of: {', '.join(TESTS)}. Default: %(default)s")
    ap.add_argument("--pairs", default="3000+3000,3000+600",
                    help="two-sample group sizes, comma-separated. Default: %(default)s")
    ap.add_argument("--only", default="",
                    help="keep only the laws whose name contains one of these comma-separated substrings")
    args = ap.parse_args(argv)
    groups = [g.strip() for g in args.laws.split(",") if g.strip()]
    tests = tuple(t.strip() for t in args.tests.split(",") if t.strip())
    if unknown := [g for g in groups if g not in LAW_GROUPS] + [t for t in tests if t not in TESTS]:
        ap.error(f"unknown law group or test: {', '.join(unknown)}")
    pairs = tuple(tuple(int(x) for x in pr.split("+")) for pr in args.pairs.split(",") if pr.strip())
    if laws is default_laws and not args.synthetic_only:
        makers = {"bundled": bundled_laws, "synthetic": synthetic_laws, "bpe": bpe_laws, "pipeline": pipeline_laws}

        def laws() -> list[Law]:
            return [law for g in groups for law in makers[g]()]
    if args.only:
        wanted, every_law = [w.strip() for w in args.only.split(",") if w.strip()], laws

        def laws() -> list[Law]:
            return [law for law in every_law() if any(w in law.name for w in wanted)]
    t0 = time.time()

    def say(msg: str) -> None:
        print(f"[{time.time() - t0:6.0f} s] {msg}", file=sys.stderr, flush=True)

    if args.synthetic_only:
        laws = synthetic_laws
    if args.reps:
        print(HEADER, flush=True)
        rows = calibration_table(laws, reps=args.reps, seed=args.seed, progress=say, pairs=pairs, tests=tests,
                                 emit=lambda block: print(format_table(block, header=False), flush=True))
        bad = [r for r in rows if not r.ok]
        print(f"\n{len(rows) - len(bad)} of {len(rows)} cells within the one-sided 3-sigma band")
    if args.aa_runs:
        fired: list[tuple[int, float, str, str, float, float]] = []
        aa = pipeline_aa(args.aa_runs, args.aa_samples, (0.05, 0.01, 1e-3), seed=args.seed, progress=say, fired=fired)
        print(format_aa_table(aa))
        print("\nfalse `shifted` runs (run, alpha, case, test with the smallest Holm p, raw p, Holm p):")
        for r, a, case, test, p, adjusted in fired:
            print(f"  run {r}, alpha {a:g}: {case} {test}: p = {p:.3g}, Holm p = {adjusted:.3g}")
    say("done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
