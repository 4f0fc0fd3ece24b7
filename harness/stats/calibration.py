"""A/A calibration, level 1: every primary test on synthetic data where H0 holds exactly.

One replicate draws fresh data and returns the p-value of each test, so that over R
replicates the rejection rate at alpha must lie in alpha +- 2 sqrt(alpha (1 - alpha) / R) and
the p-values must look uniform. Used by tests/stats/test_calibration.py (R = 200) and
benchmarks/aa_false_alarms.py (R >= 1000). Pure numpy/scipy.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from speceq.stats._validate import check_int, check_level, check_rng
from speceq.stats.counts import joint_symbols, paired_counts, position_symbols
from speceq.stats.goodness import chisquare_gof
from speceq.stats.martingale import argmax_leak_z, draft_drift_z, temperature_drift_z
from speceq.stats.pit import pit_uniformity, randomized_pit
from speceq.stats.sequence import cramervonmises_2samp_permutation, ks_2samp_jittered
from speceq.stats.synthetic import random_target_probs, sample_categorical, scores_from_probs
from speceq.stats.twosample import chisquare_homogeneity

#: Replicate functions: Generator -> {test name: p-value}.
Replicate = Callable[[np.random.Generator], dict[str, float]]


def _rejection_band_iv(alpha: object, reps: object) -> tuple[float, int]:
    return check_level(alpha, "alpha"), check_int(reps, "reps", minimum=1)


def rejection_band(alpha: float, reps: int) -> tuple[float, float]:
    """alpha -+ 2 sqrt(alpha (1 - alpha) / reps): where an exact test's rejection rate must lie."""
    alpha, reps = _rejection_band_iv(alpha, reps)
    half = 2.0 * math.sqrt(alpha * (1.0 - alpha) / reps)
    return alpha - half, alpha + half


def _oracle_replicate_iv(rng: object, n_tokens: object, vocab: object) -> tuple[np.random.Generator, int, int]:
    return check_rng(rng), check_int(n_tokens, "n_tokens", minimum=10), check_int(vocab, "vocab", minimum=2)


def oracle_replicate(rng: np.random.Generator, n_tokens: int = 300, vocab: int = 20) -> dict[str, float]:
    """p-values of the oracle tests when every token is drawn exactly from its p (top-k 12)."""
    rng, n_tokens, vocab = _oracle_replicate_iv(rng, n_tokens, vocab)
    probs = random_target_probs(rng, n_tokens, vocab, top_k=min(12, vocab))
    draft = random_target_probs(rng, n_tokens, vocab)
    scores = scores_from_probs(probs, sample_categorical(probs, rng), draft_probs=draft)
    pit = pit_uniformity(randomized_pit(scores, rng))
    first = probs[0]  # one fixed context, sampled n_tokens times: the first-token GOF test
    first_counts = np.bincount(sample_categorical(np.broadcast_to(first, (n_tokens, vocab)), rng), minlength=vocab)
    out = {t.name: t.pvalue for t in pit.tests()}
    out.update({
        "z argmax leak": argmax_leak_z(scores).pvalue,
        "z temperature drift": temperature_drift_z(scores).pvalue,
        "z drift toward draft": draft_drift_z(scores).pvalue,
        "chi2 goodness of fit": chisquare_gof(first_counts, first).pvalue,
    })
    return out


def _toy_sequences_iv(
    rng: object, initial: object, transition: object, rows: object, max_new_tokens: object
) -> tuple[np.random.Generator, np.ndarray, np.ndarray, int, int]:
    init = np.asarray(initial, dtype=np.float64)
    trans = np.asarray(transition, dtype=np.float64)
    if init.ndim != 1 or trans.shape != (init.size, init.size):
        raise ValueError(f"`transition` must be [V, V] with V = len(`initial`) = {init.size}, got {trans.shape}")
    return check_rng(rng), init, trans, check_int(rows, "rows", minimum=1), check_int(max_new_tokens, "max_new_tokens", minimum=1)


def toy_sequences(
    rng: np.random.Generator, initial: np.ndarray, transition: np.ndarray, rows: int, max_new_tokens: int, eos: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Rows of a first-order Markov 'language model' stopping at ``eos``: (tokens, lengths).

    Layout of a SampleBatch: int64 ``[rows, max_new_tokens]`` padded with -1, lengths with EOS counted.
    """
    rng, init, trans, rows, steps = _toy_sequences_iv(rng, initial, transition, rows, max_new_tokens)
    tokens = np.full((rows, steps), -1, dtype=np.int64)
    lengths = np.zeros(rows, dtype=np.int64)
    alive = np.ones(rows, dtype=bool)
    current = sample_categorical(np.broadcast_to(init, (rows, init.size)), rng)
    for t in range(steps):
        tokens[alive, t] = current[alive]
        lengths[alive] += 1
        alive &= current != eos
        if not alive.any():
            break
        current = sample_categorical(trans[current], rng)
    return tokens, lengths


def _two_sample_replicate_iv(rng: object, rows: object) -> tuple[np.random.Generator, int]:
    return check_rng(rng), check_int(rows, "rows", minimum=10)


def two_sample_replicate(rng: np.random.Generator, rows: int = 400) -> dict[str, float]:
    """p-values of the black-box tests for two independent sample sets of the same toy model."""
    rng, rows = _two_sample_replicate_iv(rng, rows)
    vocab = 12
    initial = rng.dirichlet(np.full(vocab, 0.7))
    transition = rng.dirichlet(np.full(vocab, 0.5), size=vocab)
    a_tok, a_len = toy_sequences(rng, initial, transition, rows, 6)
    b_tok, b_len = toy_sequences(rng, initial, transition, rows, 6)
    out: dict[str, float] = {}
    for t in (0, 2):
        _, ca, cb = paired_counts(position_symbols(a_tok, a_len, t), position_symbols(b_tok, b_len, t))
        out[f"chi2 position {t}"] = chisquare_homogeneity(ca, cb, mc_samples=999, rng=rng).pvalue
    _, ca, cb = paired_counts(joint_symbols(a_tok, a_len, 2), joint_symbols(b_tok, b_len, 2))
    out["chi2 joint first 2"] = chisquare_homogeneity(ca, cb, mc_samples=999, rng=rng).pvalue
    sparse = rng.dirichlet(np.full(6, 1.0))
    sa, sb = rng.multinomial(25, sparse), rng.multinomial(40, sparse)
    out["chi2 sparse (Monte Carlo)"] = chisquare_homogeneity(sa, sb, min_pooled=1, mc_samples=199, rng=rng).pvalue
    out["KS lengths"] = ks_2samp_jittered(a_len, b_len, rng).pvalue
    out["CvM lengths"] = cramervonmises_2samp_permutation(a_len, b_len, rng, n_resamples=199).pvalue
    return out


def _collect_pvalues_iv(replicate: object, reps: object, seed: object) -> tuple[Replicate, int, int]:
    if not callable(replicate):
        raise TypeError(f"`replicate` must be callable, got {type(replicate).__name__}")
    return replicate, check_int(reps, "reps", minimum=1), check_int(seed, "seed", minimum=0)


def collect_pvalues(replicate: Replicate, reps: int, seed: int) -> dict[str, np.ndarray]:
    """Run ``reps`` replicates with independent child generators of ``seed``: name -> p-values."""
    replicate, reps, seed = _collect_pvalues_iv(replicate, reps, seed)
    rows = [replicate(np.random.default_rng(child)) for child in np.random.SeedSequence(seed).spawn(reps)]
    return {name: np.array([r[name] for r in rows]) for name in rows[0]}
