"""Rejection rates of the first-token methods (:mod:`speceq.power.methods`) over repetitions.

Every method gets a level-``alpha`` threshold from statistics simulated under H0 (draws
from the exact first-token target law p), and the published rule is evaluated as well.
Samples under test come either from an exact law (a mutant whose first-token law is known
by enumeration: drawing from it is drawing the engine's first tokens, which the tests
check) or from engine samples (token arrays, one row per repetition).

Method keys: ``np`` (Neyman-Pearson, needs the exact law), ``vllm`` / ``vllm_published``
(L2 convergence, calibrated / published rule), ``trtllm`` / ``trtllm_published`` (KL gap:
calibrated, on bins from p with expected count >= 25 so that no bin is empty / published
rule on raw tokens).
"""

from __future__ import annotations

import numpy as np

from speceq.power.methods import (
    TRTLLM_KL_THRESHOLD,
    VLLM_MULTIPLIER,
    LogLikelihoodRatio,
    kl_gap,
    merge_bins,
    null_threshold,
    rejection_rate,
    simulate_counts,
    simulated_llr,
    vllm_reference_laws,
    vllm_sizes,
)
from speceq.stats.goodness import probability_bins

FIRST_TOKEN_METHODS = ("np", "vllm", "vllm_published", "trtllm", "trtllm_published")
#: Expected count per bin of the binned KL gap: an empty bin (KL = inf) then has probability ~e^-25.
TRTLLM_MIN_EXPECTED = 25.0


def nested_counts_simulated(law: np.ndarray, sizes: list[int], reps: int, rng: np.random.Generator) -> np.ndarray:
    """Counts ``[reps, len(sizes), V]`` of nested samples from ``law`` (growing by increments)."""
    out = np.zeros((reps, len(sizes), law.size), dtype=np.int64)
    total = np.zeros((reps, law.size), dtype=np.int64)
    previous = 0
    for j, s in enumerate(sizes):
        total = total + simulate_counts(law, s - previous, reps, rng)
        out[:, j] = total
        previous = s
    return out


def nested_counts_of_rows(tokens: np.ndarray, sizes: list[int], vocab: int) -> np.ndarray:
    """Counts ``[reps, len(sizes), V]`` of the first ``s`` tokens of each row of ``tokens`` ``[reps, n]``."""
    return np.stack([np.stack([np.bincount(row[:s], minlength=vocab) for s in sizes]) for row in tokens])


def counts_of_rows(tokens: np.ndarray, vocab: int) -> np.ndarray:
    """Counts ``[reps, V]`` of each row of ``tokens`` ``[reps, n]``."""
    return np.stack([np.bincount(row, minlength=vocab) for row in tokens])


def vllm_statistics(nested: np.ndarray, target: np.ndarray, references: np.ndarray) -> np.ndarray:
    """vLLM's (ratio to target) / (ratio to references) per repetition, ``[reps]`` (small = flagged).

    Same distances as :func:`speceq.power.methods.vllm_statistic`, vectorised:
    ||R - h||_F^2 = sum ||r_i||^2 - 2 h . sum r_i + rows ||h||^2.
    """
    h = nested / nested.sum(axis=2, keepdims=True)  # [R, S, V]
    d_t = np.linalg.norm(h - target[None, None, :], axis=2)  # [R, S]
    rows = references.shape[0]
    sq = (references**2).sum() - 2.0 * h @ references.sum(axis=0) + rows * (h**2).sum(axis=2)
    d_r = np.sqrt(np.maximum(sq, 0.0)) / rows
    ratio_t = np.divide(d_t[:, 0], d_t[:, -1], out=np.full(d_t.shape[0], np.inf), where=d_t[:, -1] > 0)
    return ratio_t / (d_r[:, 0] / d_r[:, -1])


def trtllm_statistics(target: np.ndarray, spec: np.ndarray, plain: np.ndarray, bins: np.ndarray | None) -> np.ndarray:
    """|KL(p||spec) - KL(p||plain)| per repetition (NaN when both are infinite), ``[reps]``."""
    target_b, spec, plain = merge_bins(target, bins), merge_bins(spec, bins), merge_bins(plain, bins)
    return np.array([kl_gap(target_b, s.astype(np.float64), b.astype(np.float64)) for s, b in zip(spec, plain)])


def first_token_rates(
    target: np.ndarray, *, n: int, alpha: float, rng: np.random.Generator, null_reps: int,
    law: np.ndarray | None = None, joint: tuple[np.ndarray, np.ndarray] | None = None, reps: int = 0,
    candidate_tokens: np.ndarray | None = None, plain_tokens: np.ndarray | None = None,
    methods: tuple[str, ...] = FIRST_TOKEN_METHODS,
) -> dict[str, float]:
    """Rejection rate of every first-token method at sample size ``n`` (per engine).

    Under test, either ``law`` (the exact first-token law, ``reps`` simulated repetitions;
    ``joint`` = (null, alternative) laws of the first two tokens for ``np``) or engine
    samples ``candidate_tokens`` and ``plain_tokens`` (int ``[reps, n]``; ``np`` is then not
    available). Methods that need more samples than ``n`` (vLLM needs n >= 100) are absent;
    only ``methods`` are computed.
    """
    p = np.asarray(target, dtype=np.float64)
    V = p.size
    from_law = law is not None
    if from_law == (candidate_tokens is not None):
        raise ValueError("give exactly one of `law` and `candidate_tokens`")
    if not from_law:
        if plain_tokens is None or np.shape(plain_tokens) != np.shape(candidate_tokens):
            raise ValueError("`plain_tokens` must be aligned with `candidate_tokens`")
        reps = int(np.shape(candidate_tokens)[0])
    rates: dict[str, float] = {}
    if from_law and joint is not None and "np" in methods:
        null_law, alt_law = joint
        llr = LogLikelihoodRatio.of(null_law, alt_law)
        cut = null_threshold(simulated_llr(llr, null_law, n, null_reps, rng), alpha)
        rates["np"] = rejection_rate(simulated_llr(llr, alt_law, n, reps, rng), cut)
    if n >= 100 and ("vllm" in methods or "vllm_published" in methods):
        sizes = vllm_sizes(n)
        refs = vllm_reference_laws(V, rng)
        null = vllm_statistics(nested_counts_simulated(p, sizes, null_reps, rng), p, refs)
        alt_nested = (nested_counts_simulated(law, sizes, reps, rng) if from_law
                      else nested_counts_of_rows(candidate_tokens, sizes, V))
        alt = vllm_statistics(alt_nested, p, refs)
        rates["vllm"] = rejection_rate(alt, null_threshold(null, alpha, reject_large=False), reject_large=False)
        rates["vllm_published"] = float(np.mean(~(alt > VLLM_MULTIPLIER)))
    if "trtllm" not in methods and "trtllm_published" not in methods:
        return rates
    if from_law:
        spec = simulate_counts(law, n, reps, rng)
        plain = simulate_counts(p, n, reps, rng)
    else:
        spec, plain = counts_of_rows(candidate_tokens, V), counts_of_rows(plain_tokens, V)
    bins = probability_bins(p, n, TRTLLM_MIN_EXPECTED)
    null = trtllm_statistics(p, simulate_counts(p, n, null_reps, rng), simulate_counts(p, n, null_reps, rng), bins)
    rates["trtllm"] = rejection_rate(trtllm_statistics(p, spec, plain, bins), null_threshold(null, alpha))
    raw = trtllm_statistics(p, spec, plain, None)
    rates["trtllm_published"] = float(np.mean(~(raw < TRTLLM_KL_THRESHOLD)))
    return rates
