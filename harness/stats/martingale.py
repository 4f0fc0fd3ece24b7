"""Martingale z-tests on oracle scores, and the support check.

Z = sum_t (f(x_t) - E_{p_t} f) / sqrt(sum_t Var_{p_t} f). The increments are martingale
differences under H0 whatever the dependence across positions, so Z -> N(0, 1) by the
martingale CLT. These are ONE-SAMPLE tests against the oracle: they are valid only when the
oracle's law is the engine's law exactly; with a slightly wrong oracle (bf16 numerics, a
server's other graph) they reject correct engines, which is why a run compares candidate and
baseline instead (:mod:`speceq.stats.comparison`) and reports these as diagnostics.

When is the normal tail trustworthy at the levels a run uses (down to ~2e-5)? Not when the sum
is dominated by a few rare large jumps (a token of probability 1e-4 under a peaked law moves
log p by 9 nats): then the sum is a Poisson count and its tail is far heavier than the normal
one, whatever the summed variance (that guard, "sum Var >= 50", was not scale-invariant: on
two-point laws {1 - r, r} with r = 1e-4 and summed variance 55 the normal p was 28x nominal at
2e-5). The condition used now is scale-invariant: the effective number of jumps

    n_eff = (sum_t Var_t f)^2 / sum_t E_t[(f - E_t f)^4]

(the fourth moments predictable from the oracle when it gives them, else their unbiased
estimates, the observed fourth powers) equals the Poisson rate n r on such laws and n / 3 for
Gaussian-like increments. With n_eff >= ``MIN_EFFECTIVE_JUMPS`` (30) the p-value is the
normal one with a one-term Edgeworth correction for the observed skewness sum d^3 / V^1.5 on
the side of the observed Z (never below the normal p); its exact size on the two-point family
(every r from 1e-5 to 0.45) is at most 0.93x nominal at 1e-3, 1e-4 and 2e-5 from n_eff = 28
on (``benchmarks/comparison_calibration.py``). Below it the p-value is the always-valid
p = 1 / max_t E_t of a scale-free mixture e-process (:func:`speceq.stats.sequential.scale_free_mixture_log_e`,
Bercu & Touati: valid for any square-integrable martingale differences): exact-conservative,
never anti-conservative, at the price of power.

f may depend only on the prefix and the emitted token x_t, never on the draft's proposal at
position t: under correct speculative sampling x_t is coupled to the draft token, so such a
statistic would reject a correct engine. Every f used here (argmax indicator, log p, the
capped draft ratio min(q/p, 10), log q - log p) is a function of the prefix distributions and x_t.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from speceq.stats._validate import as_real_sample
from speceq.stats.results import SupportResult, ZTestResult
from speceq.stats.scores import TokenScores
from speceq.stats.sequential import scale_free_mixture_log_e

#: Smallest effective number of jumps (sum Var)^2 / sum E d^4 at which the normal p-value is used.
MIN_EFFECTIVE_JUMPS = 30.0


def _skew_iv(z: object, skewness: object) -> tuple[float, float]:
    zf, g = float(z), float(skewness)  # type: ignore[arg-type]
    if not (np.isfinite(zf) and np.isfinite(g)):
        raise ValueError(f"`z` and `skewness` must be finite, got {z!r}, {skewness!r}")
    return zf, g


def skew_corrected_pvalue(z: float, skewness: float) -> float:
    """Two-sided p-value of a standardised sum Z with skewness ``skewness`` (dimensionless).

    On the side of the observed z the tail is the one-term Edgeworth expansion
    P(Z >= z) ~ 1 - Phi(z) + phi(z) g (z^2 - 1) / 6 (mirrored for z < 0), floored at the normal
    tail; p = min(1, 2 tail). With g = 0 it is the normal p-value 2 (1 - Phi(|z|)).
    """
    z, g = _skew_iv(z, skewness)
    normal = float(stats.norm.sf(abs(z)))
    correction = float(stats.norm.pdf(z)) * g * (z * z - 1.0) / 6.0
    tail = normal + correction if z >= 0 else normal - correction  # heavy upper tail when g > 0
    return float(min(1.0, 2.0 * max(tail, normal)))


def _martingale_z_iv(f: object, mean: object, var: object, name: object) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    if not isinstance(name, str) or not name:
        raise TypeError(f"`name` must be a non-empty string, got {name!r}")
    arrays = [as_real_sample(x, label, min_size=0, context=name) for label, x in (("f", f), ("mean", mean), ("var", var))]
    fa, ma, va = arrays
    if not (fa.size == ma.size == va.size):
        raise ValueError(f"`f`, `mean` and `var` must have equal lengths, got {fa.size}, {ma.size}, {va.size}")
    if fa.size == 0:
        raise ValueError(f"`f` is empty ({name}): no tokens to test")
    if va.min() < 0:
        raise ValueError(f"`var` must be non-negative, found {va.min()} at index {int(np.argmin(va))} ({name})")
    return fa, ma, va, name


def effective_jumps(var: np.ndarray, fourth_moment: np.ndarray) -> float:
    """n_eff = (sum var)^2 / sum fourth_moment: the Poisson rate of a sum of rare jumps (dimensionless).

    Scale-invariant (f -> c f leaves it unchanged). inf when every fourth moment is 0.
    """
    v = float(np.sum(var))
    m4 = float(np.sum(fourth_moment))
    return float("inf") if m4 <= 0 else v * v / m4


def martingale_z(
    f: np.ndarray, mean: np.ndarray, var: np.ndarray, *, name: str, excluded: int = 0,
    fourth_moment: np.ndarray | None = None, min_effective_jumps: float = MIN_EFFECTIVE_JUMPS,
) -> ZTestResult:
    """Z = sum(f - mean) / sqrt(sum var), two-sided; p from the normal law where it is trustworthy.

    f, mean, var: per token, in collection order (positions ascending within a row; the
    e-process fallback needs it). fourth_moment: per token E[(f - mean)^4] under H0 when known
    (else the observed (f - mean)^4 estimate it). When the effective number of jumps
    (:func:`effective_jumps`) is >= ``min_effective_jumps`` the p-value is the skewness-corrected
    normal one (:func:`skew_corrected_pvalue`, method ``"normal"``); below it the always-valid
    p-value of the normal-mixture e-process (method ``"e-process"``, ``guarded`` set; scale-free, as the condition is).

    If sum(var) == 0, f is deterministic under H0: Z = 0, p = 1 when every f equals its
    mean (to rounding), else Z = +-inf, p = 0 (impossible under H0). ``excluded`` is only recorded.
    """
    fa, ma, va, name = _martingale_z_iv(f, mean, var, name)
    if (isinstance(min_effective_jumps, bool) or not isinstance(min_effective_jumps, (int, float))
            or not 0 <= min_effective_jumps < np.inf):
        raise ValueError(f"`min_effective_jumps` must be a finite number >= 0, got {min_effective_jumps!r}")
    dev = fa - ma
    m4 = dev**4 if fourth_moment is None else _fourth_iv(fourth_moment, fa.size, name)
    guarded = False
    method = "normal"
    excess = float(np.sum(dev))
    total_var = float(np.sum(va))
    skewness = 0.0
    n_eff = None
    if total_var <= 1e-15 * fa.size:  # rounding-level variance: f is deterministic under H0
        scale = max(1.0, float(np.sum(np.abs(fa)) + np.sum(np.abs(ma))))
        method = "deterministic"
        if abs(excess) <= 1e-9 * scale:
            z, p = 0.0, 1.0
        else:
            z, p = float(np.copysign(np.inf, excess)), 0.0
    else:
        z = excess / float(np.sqrt(total_var))
        skewness = float(np.sum(dev * dev * dev)) / total_var**1.5
        n_eff = effective_jumps(va, m4)
        if n_eff >= min_effective_jumps:
            p = skew_corrected_pvalue(z, skewness)
        else:
            top = float(np.max(scale_free_mixture_log_e(dev, va)))
            p, guarded, method = float(min(1.0, np.exp(-max(0.0, top)))), True, "e-process"
    return ZTestResult(
        name=name, statistic=float(z), pvalue=p, n=fa.size,
        observed_mean=float(fa.mean()), expected_mean=float(ma.mean()), excluded=int(excluded),
        summed_variance=total_var, guarded=guarded, skewness=skewness, effective_jumps=n_eff, method=method,
    )


def _fourth_iv(m4: object, size: int, name: str) -> np.ndarray:
    arr = np.asarray(m4, dtype=np.float64)
    if arr.shape != (size,) or not np.all(np.isfinite(arr)) or (arr.size and arr.min() < 0):
        raise ValueError(f"`fourth_moment` must be {size} finite non-negative values ({name})")
    return arr


def _scores_iv(scores: object) -> TokenScores:
    if not isinstance(scores, TokenScores):
        raise TypeError(f"`scores` must be a TokenScores, got {type(scores).__name__}")
    if len(scores) == 0:
        raise ValueError("`scores` holds no tokens")
    return scores


def argmax_leak_z(scores: TokenScores) -> ZTestResult:
    """Greedy leak: f = 1{x = argmax p}, E f = max p, Var f = m(1 - m)."""
    s = _scores_iv(scores)
    m = np.asarray(s.argmax_prob, dtype=np.float64)
    v = m * (1.0 - m)
    return martingale_z(np.asarray(s.is_argmax, dtype=np.float64), m, v, name="argmax leak",
                        fourth_moment=v * ((1.0 - m) ** 3 + m**3))


def temperature_drift_z(scores: TokenScores) -> ZTestResult:
    """Temperature drift: f = log p(x), E f = -H(p), Var f = Var_p log p (nats).

    Tokens with p(x) = 0 (log p = -inf) are excluded and counted; :func:`support_violations`
    reports them as hard failures.
    """
    s = _scores_iv(scores)
    if s.logp_mean is None or s.logp_var is None:
        raise ValueError("`scores` has no logp_mean/logp_var (the oracle knew only the top-K of each law): "
                         "temperature drift needs the whole law")
    ok = np.asarray(s.prob) > 0
    if not ok.any():
        raise ValueError("every token of `scores` has probability 0: temperature drift is undefined")
    m4 = None if s.logp_m4 is None else s.logp_m4[ok]
    return martingale_z(s.logp[ok], s.logp_mean[ok], s.logp_var[ok], name="temperature drift",
                        excluded=int((~ok).sum()), fourth_moment=m4)


def draft_drift_z(scores: TokenScores) -> ZTestResult:
    """Drift toward the draft: f = log q_draft(x) - log p(x), with mean and variance under p.

    Positive Z: emitted tokens are likelier under the draft than the target implies.
    Tokens with p(x) = 0 are excluded and counted.
    """
    s = _scores_iv(scores)
    if not s.has_draft or s.draft_llr_mean is None or s.draft_llr_var is None:
        raise ValueError("`scores` has no draft scores (draft_llr is None): score with a draft model to run this test")
    ok = np.asarray(s.prob) > 0
    if not ok.any():
        raise ValueError("every token of `scores` has probability 0: draft drift is undefined")
    return martingale_z(
        s.draft_llr[ok], s.draft_llr_mean[ok], s.draft_llr_var[ok], name="drift toward draft", excluded=int((~ok).sum())
    )


def draft_ratio_z(scores: TokenScores) -> ZTestResult:
    """Drift toward the draft with a bounded score: f = min(q(x) / p(x), cap), mean and variance under p.

    Positive Z: emitted tokens are likelier under the draft than the target implies. Unlike
    log q - log p (unbounded, with a floored q: a token outside the draft's support moved it
    by ~60 nats) every increment lies in [-E f, cap - E f]. Needs the oracle's draft-ratio moments.
    """
    s = _scores_iv(scores)
    if not s.has_draft_ratio:
        raise ValueError("`scores` has no draft-ratio scores (draft_ratio is None): score with a draft model "
                         "through an oracle that computes them")
    return martingale_z(s.draft_ratio, s.draft_ratio_mean, s.draft_ratio_var, name="draft ratio",
                        fourth_moment=s.draft_ratio_m4)


def support_violations(scores: TokenScores) -> SupportResult:
    """Tokens emitted with p(x) = 0 under the processed target (outside top-k/top-p): hard failures.

    The 1-df martingale test of f = 1{p(x) = 0} has mean and variance 0, so any such token
    is impossible under H0: p = 0 when there is one, else 1. ``indices`` index the scores.
    """
    s = _scores_iv(scores)
    bad = np.flatnonzero(np.asarray(s.prob) <= 0)
    return SupportResult(
        statistic=int(bad.size), pvalue=0.0 if bad.size else 1.0, n=len(s), indices=tuple(int(i) for i in bad)
    )
