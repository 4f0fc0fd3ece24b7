"""Anytime-valid tests: e-processes and a time-uniform TV bound (pure numpy).

An *e-process* E_t >= 0 has E[E_tau] <= 1 under H0 for every stopping time tau; by Ville's
inequality P(sup_t E_t >= 1/a) <= a. So a test that rejects the first time E_t >= 1/a keeps
its false-alarm rate <= a however often it is looked at, and ``p_t = min(1, 1 / max_{s<=t} E_s)``
is an always-valid p-value. K e-processes monitored together reject at E >= K / alpha each
(e-value Bonferroni): the family-wise error stays <= alpha under continuous monitoring.

Three constructions, each a mixture of test (super)martingales, so the mixture is one too:

``normal_mixture_log_e``
    For martingale increments d_t = f(x_t) - E_{p_t} f with known conditional variance
    v_t = Var_{p_t} f (martingale increments such as the one-sample z-tests: argmax leak, temperature drift, draft drift).
    Bercu & Touati (2008, Thm 2.1): for any square-integrable martingale difference d and
    every real lambda, E[exp(lambda d - lambda^2 (d^2 + v) / 2) | past] <= 1, with no
    boundedness assumption (log p is unbounded below). Mixing lambda ~ N(0, 1/rho) gives
    E_t = sqrt(rho / (rho + W_t)) exp(S_t^2 / (2 (rho + W_t))), S_t = sum d, W_t = sum (d^2 + v).
    It is two-sided. A fixed grid of rho values (uniform weights) covers many scales.
``plugin_lr_log_e``
    One-sample test of i.i.d. categorical draws against a known law p (first token against
    the oracle's exact law; randomised PIT values binned against the uniform law): the
    Bayes factor of a Dirichlet(beta p) prior, E_t = prod_s q_{s-1}(x_s) / p(x_s) with the
    predictive q_{s-1}(x) = (c_{s-1}(x) + beta p(x)) / (s - 1 + beta). A token with
    p(x) = 0 gives E = inf (impossible under H0).
``paired_sign_log_e``
    Two-sample test of paired real scores (candidate row score minus baseline row score, D_t).
    Under H0 the two rows of a pair are i.i.d., so given every magnitude |D_s| the signs are
    i.i.d. fair coins and E_t = prod_t (1 + c D_t / B_t) is a test martingale for any bet c in
    (-1, 1) and any B_t >= |D_t| that depends only on the magnitudes and the past; here
    B_t = max(|D_t|, 2 x the RMS of the earlier D). Valid at every look whatever the oracle's
    error (the scores are oracle-derived, the validity is not).
``paired_exchangeability_log_e``
    Two-sample test of baseline draws a_t and candidate draws b_t (i.i.d. within each engine).
    Under H0 (same law) the order within the pair (a_t, b_t) is a fair coin given the
    unordered pair, so E_t = prod_t (1 - w + 2 w r_t(b_t | {a_t, b_t})) is a test martingale
    for any predictable r_t; r_t is the plug-in probability that the candidate's symbol is
    b_t from the counts of the earlier pairs (add-gamma smoothing), w in a fixed grid.

The TV confidence sequence: the fixed-n McDiarmid bound only holds at one n. A look grid
g_0 < g_1 < ... fixed before any data (four steps per doubling, anchored so the default
budget is a grid point) gets level alpha_k = alpha / ((k + 1)(k + 2)) (they sum to alpha); at any n the bound
uses the data up to the largest grid point <= n. The union bound makes it hold at every n
at once, however often (and however data-dependently) it is read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from speceq.stats._validate import check_int, check_level
from speceq.stats.counts import paired_counts
from speceq.stats.results import _Result
from speceq.stats.tv import tv_distance, tv_upper_bound_oracle, tv_upper_bound_two_sample

#: rho grid of the normal mixture (units of the summed variance W): 10^0 .. 10^5.
DEFAULT_RHOS = (1.0, 10.0, 100.0, 1_000.0, 10_000.0, 100_000.0)
#: Dirichlet prior strengths of the plug-in likelihood ratio.
DEFAULT_BETAS = (2.0, 20.0, 200.0)
#: Betting fractions of the paired exchangeability test, and its add-gamma smoothing.
DEFAULT_WEIGHTS = (0.5, 0.9)
PAIR_SMOOTHING = 0.5
#: The look grid: doubling, anchored so that ANCHOR (the default budget) is grid point ANCHOR_INDEX.
GRID_ANCHOR = 3000
GRID_ANCHOR_INDEX = 10


def _log_mean_exp(x: np.ndarray, axis: int = 0) -> np.ndarray:
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        return np.squeeze(m, axis=axis) + np.log(np.mean(np.exp(x - m), axis=axis))


def normal_mixture_log_e(d: np.ndarray, v: np.ndarray, rhos: tuple[float, ...] = DEFAULT_RHOS) -> np.ndarray:
    """log E_t of the self-normalised normal-mixture e-process along the last axis.

    d: martingale increments f(x_t) - E_{p_t} f; v: their conditional variances Var_{p_t} f
    (same shape, any leading axes = independent replicates). Returns log E_t, same shape.
    """
    d = np.asarray(d, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    s = np.cumsum(d, axis=-1)
    w = np.cumsum(d * d + v, axis=-1)
    parts = np.stack([0.5 * (np.log(r) - np.log(r + w)) + s * s / (2.0 * (r + w)) for r in rhos])
    return _log_mean_exp(parts, axis=0)


#: theta grid of the scale-free mixture (each with both signs): lambda_t = theta / sqrt(mean v_1..v_t).
DEFAULT_THETAS = (0.003, 0.01, 0.03, 0.1, 0.3, 1.0)


def scale_free_mixture_log_e(d: np.ndarray, v: np.ndarray, thetas: tuple[float, ...] = DEFAULT_THETAS) -> np.ndarray:
    """log E_t of a scale-free mixture of Bercu-Touati supermartingales along the last axis.

    For each theta in +-``thetas`` the process exp(sum_s l_s d_s - sum_s l_s^2 (d_s^2 + v_s) / 2)
    with the predictable l_s = theta / sqrt(mean(v_1 .. v_s)) is a supermartingale for any
    square-integrable martingale differences d with conditional variances v (v_s is known
    before d_s); their average is one too. Multiplying d by c and v by c^2 leaves it unchanged,
    unlike a mixture with a fixed prior scale. Same shapes in, log E_t out.
    """
    d = np.asarray(d, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    steps = np.arange(1, d.shape[-1] + 1, dtype=np.float64)
    mean_v = np.cumsum(v, axis=-1) / steps
    unit = np.where(mean_v > 0, 1.0 / np.sqrt(np.where(mean_v > 0, mean_v, 1.0)), 0.0)
    a = np.cumsum(unit * d, axis=-1)
    b = np.cumsum(unit * unit * (d * d + v), axis=-1) / 2.0
    parts = [sign * th * a - th * th * b for th in thetas for sign in (1.0, -1.0)]
    return _log_mean_exp(np.stack(parts), axis=0)


#: Betting fractions c of the bounded betting e-process (each used with both signs).
DEFAULT_FRACTIONS = (0.05, 0.1, 0.2, 0.4, 0.8)


def betting_log_e(d: np.ndarray, upper: np.ndarray, lower: np.ndarray | None = None, var: np.ndarray | None = None,
                  fractions: tuple[float, ...] = DEFAULT_FRACTIONS) -> np.ndarray:
    """log E_t of a two-sided betting e-process for martingale increments with predictable bounds.

    d: increments f(x_t) - E_{p_t} f with lower_t <= d_t <= upper_t (bounds known before x_t,
    upper >= 0 >= lower). Each fraction c in ``fractions`` is bet both ways: against too
    small increments with the factor 1 - c d_t / upper_t (>= 1 - c > 0), and for too large
    ones with 1 + c d_t / |lower_t|. Where d is unbounded below (``lower`` None, e.g.
    log p(x)), the upward bet is Bennett's supermartingale exp(l d - var phi(l u) / u^2) with
    l = c / u, phi(y) = e^y - 1 - y, which needs only d <= u and the conditional variance
    ``var``. Steps with a zero bound carry no bet. Same shapes in, log E_t out (last axis = time).
    """
    d = np.asarray(d, dtype=np.float64)
    up = np.asarray(upper, dtype=np.float64)
    up_ok = up > 1e-12
    u = np.where(up_ok, up, 1.0)
    parts = []
    for c in fractions:
        parts.append(np.cumsum(np.where(up_ok, np.log1p(-c * np.minimum(d / u, 1.0)), 0.0), axis=-1))
        if lower is None:
            if var is None:
                raise ValueError("`var` is needed when `lower` is None (increments unbounded below)")
            v = np.asarray(var, dtype=np.float64)
            bennett = c * d / u - v * (math.exp(c) - 1.0 - c) / (u * u)
            parts.append(np.cumsum(np.where(up_ok, bennett, 0.0), axis=-1))
        else:
            lo = -np.asarray(lower, dtype=np.float64)
            lo_ok = lo > 1e-12
            lw = np.where(lo_ok, lo, 1.0)
            parts.append(np.cumsum(np.where(lo_ok, np.log1p(c * np.maximum(d / lw, -1.0)), 0.0), axis=-1))
    return _log_mean_exp(np.stack(parts), axis=0)


def _occurrences_before(x: np.ndarray) -> np.ndarray:
    """For each position s of each row of ``x`` (2-D, small non-negative ints): #{u < s : x_u = x_s}."""
    rows, n = x.shape
    key = (np.arange(rows)[:, None] * (int(x.max(initial=0)) + 1) + x).ravel()
    order = np.argsort(key, kind="stable")
    sk = key[order]
    start = np.searchsorted(sk, sk, side="left")
    rank = np.empty(key.size, dtype=np.int64)
    rank[order] = np.arange(key.size) - start
    return rank.reshape(rows, n)


def plugin_lr_log_e(x: np.ndarray, probs: np.ndarray, betas: tuple[float, ...] = DEFAULT_BETAS) -> np.ndarray:
    """log E_t of the Dirichlet-mixture likelihood ratio of categorical draws ``x`` against ``probs``.

    x: category indices (1-D, or 2-D = replicates x time); probs: the null law (1-D, sums
    to 1). A draw with probs[x] == 0 makes log E = +inf from then on.
    """
    x2 = np.atleast_2d(np.asarray(x, dtype=np.int64))
    p = np.asarray(probs, dtype=np.float64)
    c = _occurrences_before(x2)
    t = np.arange(x2.shape[1], dtype=np.float64)[None, :]
    px = p[x2]
    out = []
    with np.errstate(divide="ignore", invalid="ignore"):
        for b in betas:
            step = np.log(c + b * px) - np.log(t + b) - np.log(px)
            step = np.where(px > 0, step, np.inf)
            out.append(np.cumsum(step, axis=-1))
    res = _log_mean_exp(np.stack(out), axis=0)
    return res if np.ndim(x) == 2 else res[0]


def _count_before(seq: np.ndarray, query: np.ndarray, symbols: int) -> np.ndarray:
    """#{u < t : seq[r, u] == query[r, t]} for every (r, t)."""
    rows, n = seq.shape
    base = (np.arange(rows)[:, None] * symbols)
    keys = np.sort(((base + seq) * (n + 1) + np.arange(n)[None, :]).ravel())
    q = (base + query) * (n + 1)
    lo = np.searchsorted(keys, q.ravel(), side="left")
    hi = np.searchsorted(keys, (q + np.arange(n)[None, :]).ravel(), side="left")
    return (hi - lo).reshape(rows, n)


def paired_exchangeability_log_e(a: np.ndarray, b: np.ndarray, weights: tuple[float, ...] = DEFAULT_WEIGHTS,
                                 gamma: float = PAIR_SMOOTHING) -> np.ndarray:
    """log E_t of the paired two-sample test: baseline symbols ``a``, candidate symbols ``b``.

    a, b: same shape (1-D, or 2-D = replicates x time), any integer symbols (END, joint
    codes). Pair t is (a[..., t], b[..., t]); equal pairs carry no evidence (factor 1).
    """
    a2 = np.atleast_2d(np.asarray(a, dtype=np.int64))
    b2 = np.atleast_2d(np.asarray(b, dtype=np.int64))
    _, inv = np.unique(np.concatenate([a2.ravel(), b2.ravel()]), return_inverse=True)
    k = int(inv.max(initial=0)) + 1
    a2, b2 = inv[: a2.size].reshape(a2.shape), inv[a2.size:].reshape(b2.shape)
    ca_a, ca_b = _count_before(a2, a2, k), _count_before(a2, b2, k)
    cb_a, cb_b = _count_before(b2, a2, k), _count_before(b2, b2, k)
    # r = P(candidate holds b_t | pair) under the plug-in laws: q(b) p(a) / (q(b) p(a) + q(a) p(b))
    num = (cb_b + gamma) * (ca_a + gamma)
    r = num / (num + (cb_a + gamma) * (ca_b + gamma))
    r = np.where(a2 == b2, 0.5, r)
    out = [np.cumsum(np.log1p(w * (2.0 * r - 1.0)), axis=-1) for w in weights]
    res = _log_mean_exp(np.stack(out), axis=0)
    return res if np.ndim(a) == 2 else res[0]


#: Betting fractions of the paired sign e-process (each used with both signs).
SIGN_FRACTIONS = (0.02, 0.05, 0.1, 0.2, 0.4, 0.8)
#: B_t = max(|D_t|, SIGN_SCALE x RMS of the earlier differences).
SIGN_SCALE = 2.0


def paired_sign_log_e(d: np.ndarray, fractions: tuple[float, ...] = SIGN_FRACTIONS) -> np.ndarray:
    """log E_t of the paired sign e-process of differences ``d`` (last axis = pairs in collection order).

    Each fraction c is bet both ways: factor 1 +- c D_t / B_t, B_t = max(|D_t|, 2 RMS(D_1..D_{t-1}))
    (the first pair: B = |D|). Pairs with D_t = 0 carry no bet. Same shape in, log E_t out.
    """
    d = np.asarray(d, dtype=np.float64)
    n = d.shape[-1]
    sq = np.cumsum(d * d, axis=-1)
    past = np.concatenate([np.zeros(d.shape[:-1] + (1,)), sq[..., :-1]], axis=-1)
    counts = np.maximum(np.arange(n, dtype=np.float64), 1.0)
    scale = np.maximum(np.abs(d), SIGN_SCALE * np.sqrt(past / counts))
    x = np.where(scale > 0, d / np.where(scale > 0, scale, 1.0), 0.0)
    parts = [np.cumsum(np.log1p(sign * c * x), axis=-1) for c in fractions for sign in (1.0, -1.0)]
    return _log_mean_exp(np.stack(parts), axis=0)


def paired_sign_eprocess(baseline: np.ndarray, candidate: np.ndarray, *, name: str, level: float) -> EProcessResult:
    """The paired sign e-process of row scores ``candidate[i] - baseline[i]`` (pairs in collection order)."""
    b = np.asarray(baseline, dtype=np.float64)
    c = np.asarray(candidate, dtype=np.float64)
    if b.ndim != 1 or b.shape != c.shape:
        raise ValueError(f"`baseline` and `candidate` must be 1-D of equal length, got shapes {b.shape} and {c.shape}")
    if not (np.all(np.isfinite(b)) and np.all(np.isfinite(c))):
        raise ValueError(f"row scores must be finite ({name})")
    if not b.size:
        return eprocess_result(name, np.zeros(0), level)
    return eprocess_result(name, paired_sign_log_e(c - b), level, effect=float(np.mean(c - b)))


def first_crossing(log_e: np.ndarray, threshold: float) -> int | None:
    """First index t with log E_t >= log(threshold) (None if never) along a 1-D path."""
    hit = np.flatnonzero(np.asarray(log_e) >= math.log(threshold))
    return int(hit[0]) if hit.size else None


@dataclass(frozen=True, slots=True, kw_only=True)
class EProcessResult(_Result):
    """An e-process after n observations.

    statistic: log of the largest e-value so far (natural log); evalue: E_n now;
    max_evalue: max_{t<=n} E_t; pvalue: the always-valid p = min(1, 1 / max_evalue);
    first_crossing: first observation index (0-based) with E_t >= 1 / level, where ``level``
    is the share of alpha the caller gave this test (None: never crossed). effect: the plug-in
    estimate, on the n observations so far, of what a two-sample e-process bets on: the mean pair
    difference, candidate minus baseline (paired sign), the plug-in TV between the two samples
    (paired exchangeability); None for the one-sample e-processes and before any observation. It
    has no interval: a fixed-n confidence interval is not valid at a data-dependent look, and no
    confidence sequence is computed per test.
    """

    name: str
    n: int
    statistic: float
    evalue: float
    max_evalue: float
    pvalue: float
    level: float
    first_crossing: int | None
    effect: float | None = None

    @property
    def rejects(self) -> bool:
        return self.first_crossing is not None

    def summary(self) -> str:
        where = f"crossed 1/level at observation {self.first_crossing + 1}" if self.rejects else "not crossed"
        return (f"e-process {self.name}: max e = {self.max_evalue:.3g} over {self.n} observations, "
                f"always-valid p = {self.pvalue:.3g} (level {self.level:.3g}, {where})")


def eprocess_result(name: str, log_e: np.ndarray, level: float, effect: float | None = None) -> EProcessResult:
    """Summarise a 1-D log-e path for a test given the share ``level`` of alpha (``effect``: see EProcessResult)."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"`name` must be a non-empty string, got {name!r}")
    level = check_level(level, "level")
    path = np.asarray(log_e, dtype=np.float64)
    if path.ndim != 1:
        raise ValueError(f"`log_e` must be 1-D, got shape {path.shape}")
    if np.isnan(path).any():
        raise ValueError(f"`log_e` holds NaN ({name})")
    if path.size == 0:
        return EProcessResult(name=name, n=0, statistic=0.0, evalue=1.0, max_evalue=1.0, pvalue=1.0, level=level,
                              first_crossing=None)
    top = float(max(0.0, path.max()))  # E_0 = 1 before any data
    return EProcessResult(
        name=name, n=int(path.size), statistic=top, evalue=float(math.exp(min(path[-1], 700.0))),
        max_evalue=float(math.exp(min(top, 700.0))), pvalue=float(min(1.0, math.exp(-top))), level=level,
        first_crossing=first_crossing(path, 1.0 / level), effect=effect,
    )


def normal_mixture_eprocess(d: np.ndarray, v: np.ndarray, *, name: str, level: float) -> EProcessResult:
    """The normal-mixture e-process of increments ``d`` with variances ``v`` (1-D), summarised."""
    d = np.asarray(d, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    if d.ndim != 1 or d.shape != v.shape:
        raise ValueError(f"`d` and `v` must be 1-D of equal length, got shapes {d.shape} and {v.shape}")
    if not (np.all(np.isfinite(d)) and np.all(np.isfinite(v))):
        raise ValueError(f"`d` and `v` must be finite ({name})")
    if v.size and v.min() < 0:
        raise ValueError(f"`v` must be non-negative, found {v.min()} ({name})")
    return eprocess_result(name, normal_mixture_log_e(d, v), level)


def plugin_lr_eprocess(x: np.ndarray, probs: np.ndarray, *, name: str, level: float) -> EProcessResult:
    """The plug-in likelihood-ratio e-process of category indices ``x`` against ``probs``, summarised."""
    x = np.asarray(x)
    p = np.asarray(probs, dtype=np.float64)
    if x.ndim != 1 or p.ndim != 1:
        raise ValueError(f"`x` and `probs` must be 1-D, got shapes {x.shape} and {p.shape}")
    if x.size and (x.min() < 0 or x.max() >= p.size):
        raise ValueError(f"`x` must index `probs` (0..{p.size - 1}) ({name})")
    if not np.all(np.isfinite(p)) or p.min(initial=0) < 0 or abs(p.sum() - 1.0) > 1e-4:
        raise ValueError(f"`probs` must be a probability vector ({name})")
    return eprocess_result(name, plugin_lr_log_e(x, p / p.sum()) if x.size else np.zeros(0), level)


def paired_exchangeability_eprocess(a: np.ndarray, b: np.ndarray, *, name: str, level: float) -> EProcessResult:
    """The paired two-sample e-process over the first min(len(a), len(b)) pairs, summarised."""
    a = np.asarray(a)
    b = np.asarray(b)
    if a.ndim != 1 or b.ndim != 1:
        raise ValueError(f"`a` and `b` must be 1-D, got shapes {a.shape} and {b.shape}")
    n = min(a.size, b.size)
    if not n:
        return eprocess_result(name, np.zeros(0), level)
    _, ca, cb = paired_counts(a[:n], b[:n])
    return eprocess_result(name, paired_exchangeability_log_e(a[:n], b[:n]), level, effect=tv_distance(ca, cb))


# --- the TV confidence sequence -------------------------------------------------------------

#: Looks per doubling of the sample count.
STEPS_PER_DOUBLING = 4


def _doubling_points(k: int, anchor: int, anchor_index: int) -> int:
    return math.ceil(anchor * 2.0 ** (k - anchor_index))


def look_grid(max_n: int, *, anchor: int = GRID_ANCHOR, anchor_index: int = GRID_ANCHOR_INDEX,
              steps: int = STEPS_PER_DOUBLING) -> tuple[int, ...]:
    """The fixed look grid up to ``max_n`` samples: doubling points d_j = ceil(anchor 2^(j - anchor_index)),
    each doubling step d_j -> d_(j+1) cut into ``steps`` (nearly) equal steps.

    With the defaults: 3, 4, 5, 6, 8, 9, 10, 12, 15, ... 1500, 1875, 2250, 2625, 3000, ...
    samples. The grid does not depend on any budget, so reruns with a larger budget share it.
    """
    max_n = check_int(max_n, "max_n", minimum=1)
    steps = check_int(steps, "steps", minimum=1)
    out: list[int] = []
    j = 0
    lo = _doubling_points(0, anchor, anchor_index)
    if lo > max_n:
        return ()
    out.append(lo)
    while True:
        hi = _doubling_points(j + 1, anchor, anchor_index)
        for i in range(1, steps + 1):
            g = lo + round(i * (hi - lo) / steps)
            if g > max_n:
                return tuple(out)
            if g > out[-1]:
                out.append(g)
        lo = hi
        j += 1


def grid_level(k: int, alpha: float) -> float:
    """alpha_k = alpha / ((k + 1)(k + 2)): the level spent at grid point k (sums to alpha)."""
    k = check_int(k, "k", minimum=0)
    return check_level(alpha, "alpha") / ((k + 1) * (k + 2))


def grid_point_at_most(n: int, **grid: int) -> tuple[int, int] | None:
    """(k, g_k) of the largest grid point <= n, or None when n is below the first one."""
    g = look_grid(n, **grid)
    return (len(g) - 1, g[-1]) if g else None


@dataclass(frozen=True, slots=True, kw_only=True)
class SequentialTVBound(_Result):
    """The time-uniform TV upper bound at n samples.

    grid_n / grid_index: the grid point whose data the bound uses; level: alpha_k (divided
    by the number of positions by the caller). tv: the plug-in TV at grid_n; upper: its bound.
    """

    n: int
    grid_n: int
    grid_index: int
    level: float
    tv: float
    upper: float
    reference: str

    def summary(self) -> str:
        return (f"time-uniform TV bound ({self.reference}) {self.upper:.4f} from TV {self.tv:.4f} at the grid point "
                f"n = {self.grid_n} (grid index {self.grid_index}, level {self.level:.3g}); {self.n} samples so far")


def sequential_tv_upper_bound(tv_at_grid: float, n: int, grid_index: int, grid_n: int, alpha: float, *,
                              positions: int = 1, oracle: bool = False) -> SequentialTVBound:
    """Upper bound on TV valid uniformly over n: the McDiarmid bound at level alpha_k / positions.

    tv_at_grid: the plug-in TV computed on the first ``grid_n`` samples per engine (two-sample)
    or candidate draws (``oracle=True``, against the exact law).
    """
    n = check_int(n, "n", minimum=1)
    grid_n = check_int(grid_n, "grid_n", minimum=1)
    if grid_n > n:
        raise ValueError(f"`grid_n` ({grid_n}) exceeds `n` ({n})")
    positions = check_int(positions, "positions", minimum=1)
    level = grid_level(grid_index, alpha) / positions
    if oracle:
        upper = tv_upper_bound_oracle(tv_at_grid, grid_n, level)
    else:
        upper = tv_upper_bound_two_sample(tv_at_grid, grid_n, grid_n, level)
    return SequentialTVBound(n=n, grid_n=grid_n, grid_index=grid_index, level=level, tv=float(tv_at_grid),
                             upper=float(upper), reference="oracle" if oracle else "two-sample")
