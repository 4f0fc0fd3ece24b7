"""Design sizes of the TV certificate and of the χ² tests, from a law estimated on the observed counts.

What decides a sampling case at n samples per engine (equal groups): the TV certificate
succeeds when, at every generated position, the plug-in TV of the two engines' token counts
plus the bound's margin, ``TV_hat + sqrt(ln(1/a) / n)`` (:func:`speceq.stats.tv_upper_bound_two_sample`
at level a per position), is below the tolerance. When both engines sample the same law p, the
plug-in is biased upward, and on a large sparse vocabulary that bias is most of it: a token of
probability p_i seen about n p_i times contributes about its whole mass when n p_i << 1. So the
size depends on the law's tail, not only on a bin count.

Model (what is assumed):

- The engines agree and each position's counts are multinomial(n, p); the token counts are
  treated as independent, each difference X_i - Y_i as Skellam with the binomial variance,
  lambda_i = n p_i (1 - p_i) per engine, so E|X_i - Y_i| = 2 lambda_i e^(-2 lambda_i) (I0 + I1)(2 lambda_i)
  (exact for Poisson counts; the Gaussian limit sqrt(4 lambda_i / pi) for large counts) and
  Var|X_i - Y_i| = 2 lambda_i - (E|X_i - Y_i|)^2. The plug-in TV is ``sum |X_i - Y_i| / (2 n)``,
  taken as Gaussian with that mean and variance.
- Positions are independent: the certificate succeeds with probability q when each of the L
  positions' bounds is below the tolerance with probability q^(1/L).
- The law is estimated by :func:`estimate_law` from the pooled counts of both engines: tokens
  seen at least :data:`HEAD_COUNT` times at their empirical frequency, the rest (seen fewer
  times or never) as a power-law tail p(r) proportional to r^(-s) over the remaining ranks of
  the vocabulary, holding the tail's empirical mass, with s fitted by maximum likelihood to
  how many tail tokens were seen 0, 1, ..., HEAD_COUNT - 1 times. Language-model laws have
  such tails (Zipf); a law whose tail is far from a power law is predicted less well
  (benchmarks/sample_size_predictor.py measures three laws at 49 152 tokens).

Detection: the χ² homogeneity test keeps a label as a bin when its expected count in one
group is >= 5 (:func:`speceq.stats.chisquare_homogeneity`); at n per engine and level ``level``
it detects a TV shift delta of the hardest, proportional shape with the given power when the
noncentrality 2 n delta^2 (w^2 = 4 delta^2, n / 2 per group pair) reaches the one of
:func:`speceq.stats.noncentrality_for_power` with bins - 1 degrees of freedom.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special, stats

from speceq.stats._validate import as_counts, as_probs, check_int, check_level, check_positive
from speceq.stats.sample_size import noncentrality_for_power

#: Tokens seen at least this often in the pooled counts keep their empirical frequency; the
#: rest are fitted as a power-law tail (:func:`estimate_law`).
HEAD_COUNT = 20
#: Expected count per group at which the χ² test keeps a label as its own bin (Cochran).
CHI2_MIN_EXPECTED = 5.0
#: Largest sample size the searches consider (per engine).
MAX_SAMPLES = 10**13

__all__ = ["HEAD_COUNT", "DetectableTV", "SampleSizePlan", "estimate_law", "expected_plugin_tv", "min_detectable_tv",
           "samples_for"]


def _laws_iv(probs: object) -> list[np.ndarray]:
    if isinstance(probs, np.ndarray) and probs.ndim == 1:
        items: list[object] = [probs]
    elif isinstance(probs, (str, bytes)) or not isinstance(probs, Sequence):
        raise TypeError(f"`probs` must be a probability vector or a sequence of them (one per position), "
                        f"got {type(probs).__name__}")
    else:
        items = list(probs)
    if not items:
        raise ValueError("`probs` holds no law (one per position expected)")
    return [as_probs(p, f"probs[{i}]") for i, p in enumerate(items)]


def _skellam_moments(p: np.ndarray, n: float) -> tuple[float, float]:
    """Mean and variance of sum |X_i - Y_i| for two independent multinomial(n, p) count vectors."""
    lam = n * p * (1.0 - p)
    x = 2.0 * lam
    m = x * (special.i0e(x) + special.i1e(x))
    return float(m.sum()), float(np.maximum(x - m * m, 0.0).sum())


def expected_plugin_tv(probs: np.ndarray, n: int) -> tuple[float, float]:
    """Mean and standard deviation of the two-sample plug-in TV at ``n`` draws per engine of one law.

    Model of the module docstring (independent Skellam differences with binomial variance).
    The mean is the plug-in's bias when the engines agree: about the mass of the tokens with
    n p_i < 1 plus sum sqrt(p_i (1 - p_i) / (pi n)) over the others.
    """
    p = as_probs(probs, "probs")
    n = check_int(n, "n", minimum=1)
    mean, var = _skellam_moments(p, float(n))
    return min(1.0, mean / (2.0 * n)), math.sqrt(var) / (2.0 * n)


def estimate_law(counts: np.ndarray, vocabulary: int | None = None) -> np.ndarray:
    """A full law (length ``vocabulary``: head then tail, each largest first) estimated from pooled token counts.

    Head: tokens counted >= :data:`HEAD_COUNT` times, at count / N. Tail: the other
    ``vocabulary - head`` tokens, holding the rest of the empirical mass, with p(r) proportional to
    r^(-s) at ranks r = head + 1, ..., vocabulary, s in [0, 4] fitted by maximum likelihood to the
    numbers of tail tokens seen 0, 1, ..., HEAD_COUNT - 1 times (Poisson counts, N p(r) each), or
    proportional to exp(sigma z_r) (z_r: normal quantiles of the tail ranks, sigma in [0, 6]) when
    that fits the same numbers better.
    ``vocabulary`` None: the labels seen plus Chao1's estimate of the unseen, f1^2 / (2 f2).
    When no token has a count below the head, the empirical law is returned as it is.
    """
    c = as_counts(counts, "counts")
    total = float(c.sum())
    if total <= 0:
        raise ValueError("`counts` must hold at least one observation")
    seen = np.sort(c[c > 0].astype(np.float64))[::-1]
    f1 = float(np.count_nonzero(seen == 1))
    f2 = float(np.count_nonzero(seen == 2))
    if vocabulary is None:
        unseen = f1 * f1 / (2.0 * f2) if f2 > 0 else f1 * (f1 - 1.0) / 2.0
        vocab = seen.size + math.ceil(unseen)
    else:
        vocab = check_int(vocabulary, "vocabulary", minimum=1)
        if vocab < seen.size:
            raise ValueError(f"`vocabulary` ({vocab}) is smaller than the {seen.size} distinct labels counted")
    head = seen[seen >= HEAD_COUNT]
    tail_counts = seen[seen < HEAD_COUNT]
    tail_labels = vocab - head.size
    law = np.zeros(vocab, dtype=np.float64)
    law[: head.size] = head / total
    tail_mass = float(tail_counts.sum()) / total
    if tail_labels == 0 or tail_mass == 0.0:
        law[: seen.size] = seen / total
        return law
    spectrum = np.bincount(tail_counts.astype(np.int64), minlength=HEAD_COUNT)[:HEAD_COUNT].astype(np.float64)
    spectrum[0] = tail_labels - tail_counts.size
    def negative_loglik(weights: np.ndarray) -> float:
        mu = total * tail_mass * weights
        # shares of the tail's labels expected to be counted k times, k < HEAD_COUNT (Poisson counts,
        # pmf(k) = pmf(k - 1) mu / k)
        share = np.empty(HEAD_COUNT)
        pmf = np.exp(-mu)
        share[0] = pmf.sum()
        for j in range(1, HEAD_COUNT):
            pmf = pmf * mu / j
            share[j] = pmf.sum()
        share = share / share.sum()
        return -float((spectrum * np.log(np.maximum(share, 1e-300))).sum())

    best: tuple[float, np.ndarray] | None = None
    for shape, upper in ((_power_tail(head.size, vocab), 4.0), (_gaussian_logit_tail(tail_labels), 6.0)):
        weights = shape(_fit_tail(lambda s, f=shape: negative_loglik(f(s)), (0.0, upper)))
        fit = negative_loglik(weights)
        if best is None or fit < best[0]:
            best = (fit, weights)
    assert best is not None
    law[head.size:] = tail_mass * best[1]
    return law


def _power_tail(head: int, vocab: int) -> Callable[[float], np.ndarray]:
    """Tail weights proportional to r^(-s) at ranks head + 1, ..., vocab (Zipf)."""
    log_rank = np.log(np.arange(head + 1, vocab + 1, dtype=np.float64))

    def weights(s: float) -> np.ndarray:
        w = np.exp(-s * (log_rank - log_rank[0]))
        return w / w.sum()
    return weights


def _gaussian_logit_tail(labels: int) -> Callable[[float], np.ndarray]:
    """Tail weights exp(sigma z_r), z_r the normal quantiles of the ranks (softmax of N(0, sigma^2) logits)."""
    z = stats.norm.isf((np.arange(labels, dtype=np.float64) + 0.5) / labels)

    def weights(sigma: float) -> np.ndarray:
        w = np.exp(sigma * (z - z[0]))
        return w / w.sum()
    return weights


def _fit_tail(objective: Callable[[float], float], bounds: tuple[float, float]) -> float:
    """Minimise a one-parameter objective: a grid of 21 points, then a bounded search around the best."""
    grid = np.linspace(bounds[0], bounds[1], 21)
    values = [objective(float(s)) for s in grid]
    i = int(np.argmin(values))
    lo, hi = float(grid[max(0, i - 1)]), float(grid[min(grid.size - 1, i + 1)])
    return float(optimize.minimize_scalar(objective, bounds=(lo, hi), method="bounded", options={"xatol": 1e-3}).x)


@dataclass(frozen=True, slots=True, kw_only=True)
class SampleSizePlan:
    """Samples per engine at which the TV certificate succeeds with ``probability`` (engines agreeing).

    n: samples per engine; expected_tv / tv_sd: the worst position's plug-in TV mean and standard
    deviation there; margin: the bound's margin sqrt(ln(1/alpha) / n) there; positions: laws.
    """

    n: int
    tolerance: float
    probability: float
    alpha: float
    positions: int
    expected_tv: float
    tv_sd: float
    margin: float

    def summary(self) -> str:
        return (f"~{self.n} samples per engine certify TV < {self.tolerance:g} with probability {self.probability:g} "
                f"(plug-in TV {self.expected_tv:.4f} +- {self.tv_sd:.4f}, margin {self.margin:.4f})")

    def to_dict(self) -> dict[str, float | int]:
        return {f: getattr(self, f) for f in self.__slots__}


def _bound_quantile(laws: list[np.ndarray], n: float, z: float, alpha: float) -> tuple[float, float, float, float]:
    """max over positions of mean + z sd of the plug-in TV, plus the margin; and the worst mean, sd."""
    margin = math.sqrt(math.log(1.0 / alpha) / n)
    worst, w_mean, w_sd = -math.inf, 0.0, 0.0
    for p in laws:
        mean, var = _skellam_moments(p, n)
        m, sd = mean / (2.0 * n), math.sqrt(var) / (2.0 * n)
        if m + z * sd > worst:
            worst, w_mean, w_sd = m + z * sd, m, sd
    return worst + margin, w_mean, w_sd, margin


def _smallest_n(holds: Callable[[int], bool], start: int = 1) -> int:
    """Smallest integer n >= start with holds(n), for a predicate that stays true once true."""
    lo, hi = start - 1, max(start, 1)
    while not holds(hi):
        lo, hi = hi, hi * 2
        if hi > MAX_SAMPLES:
            raise ValueError(f"no sample size up to {MAX_SAMPLES:.0e} per engine reaches the target")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if holds(mid):
            hi = mid
        else:
            lo = mid
    return hi


def samples_for(tolerance: float, probs: np.ndarray | Sequence[np.ndarray], *, alpha: float,
                probability: float = 0.9) -> SampleSizePlan:
    """Samples per engine at which the two-sample TV certificate succeeds with ``probability``.

    probs: the law both engines sample at each position (one vector, or one per position), e.g.
    :func:`estimate_law` of the pooled counts. alpha: the bound's level PER POSITION (the run's
    alpha / positions). The smallest n with, at every position, mean + z sd of the plug-in TV
    plus sqrt(ln(1/alpha) / n) <= tolerance, z the probability^(1/positions) normal quantile
    (module docstring: what is assumed).
    """
    tol = check_positive(tolerance, "tolerance", upper=1.0)
    laws = _laws_iv(probs)
    alpha = check_level(alpha, "alpha")
    probability = check_level(probability, "probability")
    z = float(stats.norm.ppf(probability ** (1.0 / len(laws))))
    n = _smallest_n(lambda m: _bound_quantile(laws, float(m), z, alpha)[0] <= tol)
    _, mean, sd, margin = _bound_quantile(laws, float(n), z, alpha)
    return SampleSizePlan(n=n, tolerance=tol, probability=probability, alpha=alpha, positions=len(laws),
                          expected_tv=mean, tv_sd=sd, margin=margin)


@dataclass(frozen=True, slots=True, kw_only=True)
class DetectableTV:
    """The smallest TV shift the χ² test detects with ``power`` at ``n`` samples per engine.

    tv: that shift (hardest, proportional shape over the test's bins; capped at 1); bins: the
    bins the test keeps at n (labels expecting >= 5 per group, at least 2); level: the test's level.
    """

    tv: float
    n: int
    bins: int
    level: float
    power: float

    def summary(self) -> str:
        return (f"at {self.n} samples per engine the chi-square ({self.bins} bins, level {self.level:.2g}) detects "
                f"a TV shift of {self.tv:.3f} with probability {self.power:g}")

    def to_dict(self) -> dict[str, float | int]:
        return {f: getattr(self, f) for f in self.__slots__}


def min_detectable_tv(n: int, probs: np.ndarray | Sequence[np.ndarray], *, level: float,
                      power: float = 0.9) -> DetectableTV:
    """Smallest TV shift detected with ``power`` by the level-``level`` χ² at ``n`` per engine.

    probs: the law (one vector, or one per position: the position whose χ² has the FEWEST bins,
    the most sensitive, is taken). See the module docstring for the shape assumed.
    """
    n = check_int(n, "n", minimum=1)
    laws = _laws_iv(probs)
    level = check_level(level, "level")
    power = check_level(power, "power")
    bins = max(2, min(int(np.count_nonzero(n * p >= CHI2_MIN_EXPECTED)) for p in laws))
    lam = noncentrality_for_power(bins - 1, level, power)
    return DetectableTV(tv=min(1.0, math.sqrt(lam / (2.0 * n))), n=n, bins=bins, level=level, power=power)
