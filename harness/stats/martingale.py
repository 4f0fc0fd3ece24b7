"""Martingale z-tests on oracle scores, and the support check.

Z = sum_t (f(x_t) - E_{p_t} f) / sqrt(sum_t Var_{p_t} f). The increments are martingale
differences under H0 whatever the dependence across positions, so Z -> N(0, 1) by the
martingale CLT. The p-value is asymptotic, not exact:

- when the summed variance is small the sum is close to a Poisson count (e.g. argmax leak on
  near-deterministic laws) and its tail is far heavier than the normal one. Below
  ``MIN_SUMMED_VARIANCE`` the test is guarded: it reports Z but returns p = 1;
- above it, a skewed sum (log p of peaked laws: rare tokens give large negative increments)
  still has one tail heavier than the normal one: 1.2-2.8x nominal at 1e-3 .. 2e-5 measured on
  peaked laws with summed variance 1 000-1 700. :func:`skew_corrected_pvalue` therefore adds
  the one-term Edgeworth correction with the observed skewness sum d^3 / V^1.5 on the side of
  the observed Z, and never returns less than the normal p-value. It brought those cells to
  0.25-1.1x nominal; the measured sizes at the levels of a run are in docs/measurements/calibration.md.

The anytime-valid e-processes of :mod:`speceq.stats.sequential` are exact, but at a fixed n
they need far more evidence (docs/explanation/statistics.md gives the power numbers), so the fixed-n
tests keep this corrected asymptotic p-value. f may depend only on the prefix and the emitted token x_t, never on the
draft's proposal at position t: under correct speculative sampling x_t is coupled to the
draft token, so such a statistic would reject a correct engine (docs/explanation/statistics.md).
Every f used here (argmax indicator, log p, log q_draft - log p) is a function of the prefix
distributions and x_t alone.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from speceq.stats.results import SupportResult, ZTestResult
from speceq.stats.scores import TokenScores

#: Smallest summed variance sum_t Var_p f at which the normal p-value is used (units of f^2).
MIN_SUMMED_VARIANCE = 50.0


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
    arrays = []
    for label, x in (("f", f), ("mean", mean), ("var", var)):
        arr = np.asarray(x, dtype=np.float64)
        if arr.ndim != 1:
            raise ValueError(f"`{label}` must be 1-D, got shape {arr.shape}")
        if not np.all(np.isfinite(arr)):
            bad = int(np.flatnonzero(~np.isfinite(arr))[0])
            raise ValueError(f"`{label}` must be finite, found {arr[bad]} at index {bad} ({name})")
        arrays.append(arr)
    fa, ma, va = arrays
    if not (fa.size == ma.size == va.size):
        raise ValueError(f"`f`, `mean` and `var` must have equal lengths, got {fa.size}, {ma.size}, {va.size}")
    if fa.size == 0:
        raise ValueError(f"`f` is empty ({name}): no tokens to test")
    if va.min() < 0:
        raise ValueError(f"`var` must be non-negative, found {va.min()} at index {int(np.argmin(va))} ({name})")
    return fa, ma, va, name


def martingale_z(
    f: np.ndarray, mean: np.ndarray, var: np.ndarray, *, name: str, excluded: int = 0,
    min_variance: float = MIN_SUMMED_VARIANCE,
) -> ZTestResult:
    """Z = sum(f - mean) / sqrt(sum var) with a two-sided, skewness-corrected normal (asymptotic) p-value.

    The skewness is sum (f - mean)^3 / (sum var)^1.5 (:func:`skew_corrected_pvalue`).

    If sum(var) == 0, f is deterministic under H0: Z = 0, p = 1 when every f equals its
    mean (to rounding), else Z = +-inf, p = 0 (impossible under H0). If 0 < sum(var) <
    ``min_variance`` the normal law is not trusted: p = 1 and ``guarded`` is set.
    ``excluded`` is only recorded.
    """
    fa, ma, va, name = _martingale_z_iv(f, mean, var, name)
    if isinstance(min_variance, bool) or not isinstance(min_variance, (int, float)) or not 0 <= min_variance < np.inf:
        raise ValueError(f"`min_variance` must be a finite number >= 0, got {min_variance!r}")
    guarded = False
    dev = fa - ma
    excess = float(np.sum(dev))
    total_var = float(np.sum(va))
    skewness = 0.0
    if total_var <= 1e-15 * fa.size:  # rounding-level variance: f is deterministic under H0
        scale = max(1.0, float(np.sum(np.abs(fa)) + np.sum(np.abs(ma))))
        if abs(excess) <= 1e-9 * scale:
            z, p = 0.0, 1.0
        else:
            z, p = float(np.copysign(np.inf, excess)), 0.0
    else:
        z = excess / float(np.sqrt(total_var))
        skewness = float(np.sum(dev * dev * dev)) / total_var**1.5
        p = skew_corrected_pvalue(z, skewness)
        if total_var < min_variance:
            p, guarded = 1.0, True
    return ZTestResult(
        name=name, statistic=float(z), pvalue=p, n=fa.size,
        observed_mean=float(fa.mean()), expected_mean=float(ma.mean()), excluded=int(excluded),
        summed_variance=total_var, guarded=guarded, skewness=skewness,
    )


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
    return martingale_z(np.asarray(s.is_argmax, dtype=np.float64), m, m * (1.0 - m), name="argmax leak")


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
    return martingale_z(s.logp[ok], s.logp_mean[ok], s.logp_var[ok], name="temperature drift", excluded=int((~ok).sum()))


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
