"""Is the predicted sample size right? The TV certificate simulated at the predicted n.

For each law (49 152 tokens): draw ``--pilots`` pilots of ``--pilot`` samples per engine, from each predict the
samples per engine at which the two-sample TV certificate (plug-in TV + sqrt(ln(L/alpha) / n)
below the tolerance at each of L positions, both engines sampling the law) succeeds with
probability 0.9, with

- new: :func:`speceq.stats.samples_for` on :func:`speceq.stats.estimate_law` of the pooled pilot;
- old: the certification size of speceq.stats.sample_size with the effective support of the
  pooled pilot (``required_n_equivalence_two_sample(tol, effective_support_upper(pilot), alpha / L)``),
  and the verdict's old required n, the larger of that and the χ² detection size at ceil(k_eff) bins;

then find by simulation the n at which the certificate succeeds in 90 % of draws (bisection on
n, ``--draws`` multinomial draws per engine and n; L independent positions of the same law), and
print predicted / simulated. The goal is a ratio within 0.7-1.3 for the new predictor.

Laws: Zipf(1.0) and Zipf(1.2) over the vocabulary (p_i proportional to i^-s), and a SmolLM2-like
law: a few dominant tokens and a long tail, built as 4 tokens of mass 0.45, 0.20, 0.10, 0.05 and
the remaining 0.20 as a softmax of N(0, 2^2) logits over the other 49 148 tokens (a log-normal
tail, like a language model's logits at T = 1 after its top few tokens; not a power law, so it
tests the tail fit's assumption).

Usage: python benchmarks/sample_size_predictor.py [--tolerance 0.15] [--pilot 1000] [--pilots 5] [--draws 200]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from speceq.stats import (
    effective_support_upper,
    estimate_law,
    noncentrality_for_power,
    required_n_equivalence_two_sample,
    samples_for,
)

VOCAB = 49_152


def zipf(s: float, vocab: int = VOCAB) -> np.ndarray:
    w = np.arange(1, vocab + 1, dtype=np.float64) ** -s
    return w / w.sum()


def smollm2_like(vocab: int = VOCAB, seed: int = 7) -> np.ndarray:
    head = np.array([0.45, 0.20, 0.10, 0.05])
    logits = np.random.default_rng(seed).normal(0.0, 2.0, vocab - head.size)
    tail = np.exp(logits - logits.max())
    return np.concatenate([head, (1.0 - head.sum()) * tail / tail.sum()])


def certificate_rate(p: np.ndarray, n: int, *, tolerance: float, alpha: float, positions: int, draws: int,
                     rng: np.random.Generator) -> float:
    """Share of draws in which the certificate succeeds at every position (engines both sampling p)."""
    margin = math.sqrt((2.0 / n) * math.log(positions / alpha) / 2.0)
    ok = 0
    for _ in range(draws):
        good = True
        for _ in range(positions):
            a = rng.multinomial(n, p)
            b = rng.multinomial(n, p)
            if 0.5 * np.abs(a - b).sum() / n + margin >= tolerance:
                good = False
                break
        ok += good
    return ok / draws


def simulated_n90(p: np.ndarray, guess: int, *, tolerance: float, alpha: float, positions: int, draws: int,
                  rng: np.random.Generator, rel: float = 0.03) -> int:
    """n (per engine) at which the certificate succeeds in 90 % of draws, by bisection on log n."""
    def rate(n: int) -> float:
        return certificate_rate(p, n, tolerance=tolerance, alpha=alpha, positions=positions, draws=draws, rng=rng)

    lo, hi = guess, guess
    while rate(lo) >= 0.9:
        lo //= 2
    while rate(hi) < 0.9:
        hi *= 2
    while hi / lo > 1.0 + rel:
        mid = int(math.sqrt(lo * hi))
        if rate(mid) >= 0.9:
            hi = mid
        else:
            lo = mid
    return int(math.sqrt(lo * hi))


def old_predictions(pilot: np.ndarray, *, tolerance: float, alpha: float, positions: int) -> tuple[int, int]:
    k = effective_support_upper(pilot)
    certify = required_n_equivalence_two_sample(tolerance, k, alpha / positions, 0.9)
    # the old verdict's detection size: chi-square at ceil(k_eff) bins, level alpha / (primary tests ~ positions + 2)
    lam = noncentrality_for_power(max(2, math.ceil(k)) - 1, alpha / (positions + 2), 0.9)
    return certify, max(certify, math.ceil(2.0 * lam / (4.0 * tolerance**2)))


def _ratios(values: list[int], sim: int) -> str:
    r = np.array(values, dtype=np.float64) / sim
    return f"{np.median(r):.2f} [{r.min():.2f}-{r.max():.2f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tolerance", type=float, default=0.15)
    ap.add_argument("--alpha", type=float, default=1e-3)
    ap.add_argument("--positions", type=int, default=4)
    ap.add_argument("--pilot", type=int, default=1000, help="pilot samples per engine the prediction sees")
    ap.add_argument("--pilots", type=int, default=5, help="independent pilots per law (the prediction's spread)")
    ap.add_argument("--draws", type=int, default=200, help="simulated runs per n")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    laws = {"Zipf(1.0)": zipf(1.0), "Zipf(1.2)": zipf(1.2), "SmolLM2-like": smollm2_like()}
    print(f"vocabulary {VOCAB}, tolerance {args.tolerance:g}, alpha {args.alpha:g}, {args.positions} positions, "
          f"{args.pilots} pilots of {args.pilot} per engine, {args.draws} draws per n")
    print("ratios predicted / simulated: median [min-max] over the pilots")
    print(f"{'law':<14}{'simulated n90':>14}{'new n (median)':>16}{'new / sim':>20}{'old cert / sim':>20}"
          f"{'old verdict / sim':>20}{'s':>6}")
    for name, p in laws.items():
        t0 = time.perf_counter()
        new, old_cert, old_verdict = [], [], []
        for _ in range(args.pilots):
            pilot = rng.multinomial(args.pilot, p) + rng.multinomial(args.pilot, p)
            law = estimate_law(pilot, VOCAB)
            new.append(samples_for(args.tolerance, [law] * args.positions, alpha=args.alpha / args.positions).n)
            c, v = old_predictions(pilot, tolerance=args.tolerance, alpha=args.alpha, positions=args.positions)
            old_cert.append(c)
            old_verdict.append(v)
        guess = int(np.median(new))
        sim = simulated_n90(p, guess, tolerance=args.tolerance, alpha=args.alpha, positions=args.positions,
                            draws=args.draws, rng=rng)
        print(f"{name:<14}{sim:>14}{guess:>16}{_ratios(new, sim):>20}{_ratios(old_cert, sim):>20}"
              f"{_ratios(old_verdict, sim):>20}{time.perf_counter() - t0:>6.0f}", flush=True)


if __name__ == "__main__":
    main()
