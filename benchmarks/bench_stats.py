"""Time the statistics on 1 M generated tokens (budget: 10 s, oracle scoring excluded).

Oracle mode: 1 M synthetic TokenScores (built first, not timed) -> randomized PIT, the four
uniformity tests, three martingale z-tests, the support check, a first-token GOF.
Black-box mode: two sample sets of a toy Markov model, 1 M generated tokens in all ->
per-position chi-square, joint first-2/first-3 chi-square, KS/CvM on lengths, Holm/BH.

Usage: python benchmarks/bench_stats.py [--tokens 1000000] [--seed 0]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from speceq.stats import (
    argmax_leak_z,
    benjamini_hochberg,
    chisquare_gof,
    chisquare_homogeneity,
    cramervonmises_2samp_permutation,
    draft_drift_z,
    holm,
    joint_symbols,
    ks_2samp_jittered,
    paired_counts,
    pit_uniformity,
    position_symbols,
    randomized_pit,
    support_violations,
    temperature_drift_z,
)
from speceq.stats.calibration import toy_sequences
from speceq.stats.scores import TokenScores
from speceq.stats.synthetic import random_target_probs, sample_categorical, scores_from_probs

BUDGET_S = 10.0


class Timer:
    def __init__(self) -> None:
        self.rows: list[tuple[str, float]] = []

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        yield
        self.rows.append((name, time.perf_counter() - start))

    @property
    def total(self) -> float:
        return sum(t for _, t in self.rows)


def build_scores(rng: np.random.Generator, n: int, vocab: int = 32, chunk: int = 100_000) -> TokenScores:
    parts = []
    for start in range(0, n, chunk):
        size = min(chunk, n - start)
        probs = random_target_probs(rng, size, vocab, top_k=24)
        draft = random_target_probs(rng, size, vocab)
        parts.append(scores_from_probs(probs, sample_categorical(probs, rng), draft_probs=draft))
    return TokenScores.concatenate(parts)


def oracle_mode(timer: Timer, scores: TokenScores, rng: np.random.Generator) -> list[float]:
    with timer("oracle: randomized PIT"):
        u = randomized_pit(scores, rng)
    with timer("oracle: KS + CvM + AD + histogram"):
        pit = pit_uniformity(u)
    with timer("oracle: 3 martingale z-tests + support"):
        zs = [argmax_leak_z(scores), temperature_drift_z(scores), draft_drift_z(scores)]
        support = support_violations(scores)
    first = random_target_probs(rng, 1, 32)[0]
    counts = np.bincount(sample_categorical(np.broadcast_to(first, (5000, 32)), rng), minlength=32)
    with timer("oracle: first-token chi-square GOF"):
        gof = chisquare_gof(counts, first)
    return [t.pvalue for t in pit.tests()] + [z.pvalue for z in zs] + [support.pvalue, gof.pvalue]


def black_box_mode(timer: Timer, rng: np.random.Generator, tokens: int) -> tuple[list[float], int]:
    vocab, steps = 200, 25
    initial = rng.dirichlet(np.full(vocab, 0.3))
    transition = rng.dirichlet(np.full(vocab, 0.1), size=vocab)
    transition[:, 0] *= 0.2  # EOS (id 0) rarer
    transition /= transition.sum(axis=1, keepdims=True)
    rows = tokens // (2 * steps)
    a_tok, a_len = toy_sequences(rng, initial, transition, rows, steps)
    b_tok, b_len = toy_sequences(rng, initial, transition, rows, steps)
    generated = int(a_len.sum() + b_len.sum())
    pvalues = []
    methods: list[str] = []
    with timer(f"black-box: {steps} per-position chi-square"):
        for t in range(steps):
            _, ca, cb = paired_counts(position_symbols(a_tok, a_len, t), position_symbols(b_tok, b_len, t))
            res = chisquare_homogeneity(ca, cb, rng=rng)
            pvalues.append(res.pvalue)
            methods.append(f"{res.method}/{res.n_bins} bins")
    with timer("black-box: one forced Monte Carlo chi-square (9999 tables)"):
        _, ca, cb = paired_counts(position_symbols(a_tok, a_len, 1), position_symbols(b_tok, b_len, 1))
        chisquare_homogeneity(ca, cb, rng=rng, method="monte-carlo")
    print("per-position methods:", ", ".join(sorted(set(methods))))
    with timer("black-box: joint first-2 and first-3 chi-square"):
        for m in (2, 3):
            _, ca, cb = paired_counts(joint_symbols(a_tok, a_len, m), joint_symbols(b_tok, b_len, m))
            pvalues.append(chisquare_homogeneity(ca, cb, rng=rng).pvalue)
    with timer("black-box: KS (tie-broken) on lengths"):
        pvalues.append(ks_2samp_jittered(a_len, b_len, rng).pvalue)
    with timer("black-box: CvM permutation (999) on lengths"):
        pvalues.append(cramervonmises_2samp_permutation(a_len, b_len, rng, n_resamples=999).pvalue)
    return pvalues, generated


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)

    build_start = time.perf_counter()
    scores = build_scores(rng, args.tokens)
    print(f"built {len(scores)} synthetic oracle scores in {time.perf_counter() - build_start:.1f} s (not timed)")

    timer = Timer()
    oracle_p = oracle_mode(timer, scores, rng)
    black_p, generated = black_box_mode(timer, rng, args.tokens)
    with timer("decide: Holm + BH over all tests"):
        all_p = np.array(oracle_p + black_p)
        holm(all_p)
        benjamini_hochberg(all_p)

    print(f"oracle mode: {len(scores)} tokens; black-box mode: {generated} generated tokens")
    width = max(len(name) for name, _ in timer.rows)
    for name, seconds in timer.rows:
        print(f"  {name:<{width}}  {seconds:7.3f} s")
    verdict = "OK" if timer.total <= BUDGET_S else "OVER BUDGET"
    print(f"  {'total':<{width}}  {timer.total:7.3f} s  (budget {BUDGET_S:g} s: {verdict})")


if __name__ == "__main__":
    main()
