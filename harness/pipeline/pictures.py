"""Compact data for the report's picture of the test that decided a case.

Two kinds: the running sums of the martingale z-tests (:func:`martingale_paths`) and the
largest bins of a chi-square test that may decide (:func:`chi2_bins`).


A martingale z-test (:mod:`speceq.stats.martingale`) sums ``f(x_t) - E_{p_t} f`` over every
scored token and divides by ``sqrt(sum Var_{p_t} f)``. Its path, the running sum after each
token, shows *where* in the sample the excess builds up, and the running variance gives the
null band ``+-z * sqrt(V_k)`` around it. The same f, mean and variance are used here as in
the tests themselves, so the path's last point is the test's statistic:
``excess[-1] / sqrt(variance[-1]) == Z``.
"""

from __future__ import annotations

import numpy as np

from speceq.stats.scores import TokenScores
from speceq.verdicts.result import TestBins, ZPath

#: Points kept per path (evenly spaced over the tokens, the last token always included).
PATH_POINTS = 100
#: Bins kept per chi-square picture (those with the largest contributions).
MAX_BINS = 12


def _sig(x: float) -> float:
    """``x`` rounded to 7 significant digits: enough for a picture, compact in JSON."""
    return float(f"{x:.7g}")


def thin_path(test: str, f: np.ndarray, mean: np.ndarray, var: np.ndarray, points: int = PATH_POINTS) -> ZPath:
    """The running sums of ``f - mean`` and ``var`` at up to ``points`` token counts (1-based, last = n)."""
    excess = np.cumsum(np.asarray(f, dtype=np.float64) - np.asarray(mean, dtype=np.float64))
    variance = np.cumsum(np.asarray(var, dtype=np.float64))
    n = excess.size
    if n == 0:
        return ZPath(test=test, tokens=(), excess=(), variance=())
    counts = np.unique(np.round(np.linspace(1, n, min(points, n))).astype(np.int64))
    return ZPath(test=test, tokens=tuple(int(c) for c in counts),
                 excess=tuple(_sig(excess[c - 1]) for c in counts),
                 variance=tuple(_sig(variance[c - 1]) for c in counts))


def martingale_paths(scores: TokenScores) -> tuple[ZPath, ...]:
    """Paths of ``z argmax leak``, ``z temperature drift`` and (with draft scores) ``z draft ratio`` and ``z draft drift``.

    Names are those of the analysis's TestOutcome objects. Tokens with p = 0 are left out of
    the log-probability tests exactly as the tests leave them out.
    """
    m = np.asarray(scores.argmax_prob, dtype=np.float64)
    paths = [thin_path("z argmax leak", np.asarray(scores.is_argmax, dtype=np.float64), m, m * (1.0 - m))]
    ok = np.asarray(scores.prob) > 0
    if ok.any() and scores.logp_mean is not None and scores.logp_var is not None:
        paths.append(thin_path("z temperature drift", scores.logp[ok], scores.logp_mean[ok], scores.logp_var[ok]))
    if scores.has_draft_ratio:
        paths.append(thin_path("z draft ratio", scores.draft_ratio, scores.draft_ratio_mean, scores.draft_ratio_var))
    if ok.any() and scores.has_draft and scores.draft_llr_mean is not None and scores.draft_llr_var is not None:
        paths.append(thin_path("z draft drift", scores.draft_llr[ok], scores.draft_llr_mean[ok], scores.draft_llr_var[ok]))
    return tuple(paths)


def chi2_bins(test: str, labels: list[str], counts_a: np.ndarray, counts_b: np.ndarray,
              tokens: list[tuple[int, ...]] | None = None) -> TestBins:
    """The :data:`MAX_BINS` bins of a two-sample chi-square with the largest Pearson contributions.

    Contribution of bin i: ``(a_i - E a_i)^2 / E a_i + (b_i - E b_i)^2 / E b_i`` with
    expectations from the pooled proportions. Kept bins are ordered by pooled count (largest
    first, ties by label order), so the picture reads like the frequency bars. ``tokens``: per bin, the
    token ids it stands for (kept with the bins, for the faces' labels).
    """
    a = np.asarray(counts_a, dtype=np.float64)
    b = np.asarray(counts_b, dtype=np.float64)
    na, nb = a.sum(), b.sum()
    pooled = a + b
    total = max(na + nb, 1.0)
    ea, eb = pooled * na / total, pooled * nb / total
    with np.errstate(divide="ignore", invalid="ignore"):
        contrib = np.where(ea > 0, (a - ea) ** 2 / ea, 0.0) + np.where(eb > 0, (b - eb) ** 2 / eb, 0.0)
    keep = np.argsort(-contrib, kind="stable")[:MAX_BINS]
    keep = keep[np.argsort(-pooled[keep], kind="stable")]
    return TestBins(test=test, labels=tuple(labels[int(i)] for i in keep),
                    baseline_counts=tuple(int(a[i]) for i in keep), candidate_counts=tuple(int(b[i]) for i in keep),
                    n_baseline=int(na), n_candidate=int(nb),
                    tokens=() if tokens is None else tuple(tuple(tokens[int(i)]) for i in keep))
