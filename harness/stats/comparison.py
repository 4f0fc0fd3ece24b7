"""Two-sample comparisons of row-level scores: candidate rows against baseline rows.

Why rows, and why pairs. Under H0 (the candidate samples the same law as the baseline) a row
of the candidate and a row of the baseline for the same prompt are i.i.d. draws of one law,
whatever that law is -- in particular whatever a shared numerics mismatch with the oracle
makes it. So for ANY score w computed from a row alone (e.g. the sum over its tokens of an
oracle-derived quantity), the pair difference D = w(candidate row i) - w(baseline row i) is
symmetric about 0, and given the magnitudes |D_1|, ..., |D_n| the signs are i.i.d. fair coins.
The sign-flip law of S = sum D_i given |D| is therefore exact under H0, with no assumption on
the oracle, on the dependence between the tokens of a row, or on the tails of w. Token-level
pooling would need independent tokens, which a slightly wrong oracle does not give.

The p-value is that of S' = sum sign(D_i) k_i, the magnitudes put on an integer grid: k_i = |D_i|
for integer differences (counts), else k_i = round(|D_i| / delta) with delta = sum |D| / min(2^16, 64 n)
(the grid depends on the magnitudes only, so given them the signs are still fair coins; S'
differs from S by ~1 % per pair, which costs no measurable power). Two valid tails of S' are
used (two-sided unless ``alternative`` says otherwise):

- the tight Gaussian bound for weighted Rademacher sums, Bentkus & Dzindzalieta (Bernoulli
  21(2), 2015): P(sum a_i eps_i >= x) <= c* (1 - Phi(x)) for sum a_i^2 <= 1, with the optimal
  c* = 1 / (4 P(N(0,1) >= sqrt 2)) ~ 3.178 -- every n, every magnitude vector;
- where that bound is below 0.2, the exact law of S' given the k_i: a sum of scaled
  binomials, whose characteristic function is a closed-form product, inverted by one FFT
  (:func:`signflip_sf_exact`). The reported p is min(bound, exact); it is never below the
  exact conditional p-value, hence valid at every level (the bound alone would cost ~1.15x
  in sample size at 1e-3 .. 2e-5).

Few pairs: a sign-flip p-value can never be below 2^(1 - n) with n pairs (0.002 at 10 pairs),
which a Holm level of 1e-3 / m cannot reach. Below :data:`PERMUTATION_MAX_PAIRS` pairs the
comparison is therefore the exact stratified permutation test of the same scores
(:func:`permutation_comparison`): under H0 all rows of a prompt, both engines', are
exchangeable, so shuffling the engine labels within each prompt gives the exact law of the
candidate's score total; its smallest p-value is 1 / C(2n, n) (5e-6 at 10 rows per engine).
Its p-value is a Monte Carlo one, (1 + exceedances) / (1 + draws), valid for any number of
draws, with draws sized to the level it is compared at and Besag-Clifford early stopping.
Which test a comparison uses depends on the layout (the number of pairs) only.

Support: rows holding at least one token of probability 0 under the oracle, compared by the
exact conditional (Fisher) test, stratified by prompt (:func:`support_comparison`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

from speceq.stats._validate import as_real_sample, check_level, check_rng
from speceq.stats.bounds import BD_CONSTANT, signflip_tail_bound
from speceq.stats.montecarlo import sequential_mc_pvalue
from speceq.stats.results import ComparisonResult, PooledComparisonResult, SupportComparisonResult

#: Integer differences are used as they are while their magnitudes sum to at most this.
EXACT_MAX_TOTAL = 1 << 20
#: Grid units of real magnitudes: k_i = round(|D_i| / (sum |D| / units)), units = min(ROUNDED_UNITS,
#: UNITS_PER_PAIR x pairs) (~1 % rounding per pair at most, and small laws for few pairs).
ROUNDED_UNITS = 1 << 16
UNITS_PER_PAIR = 64
#: The exact law is computed only where the bound's p-value is below this (larger p-values only bound it).
EXACT_BELOW = 0.2
#: Absolute accuracy of the FFT-inverted tail; exact p-values are never reported below it.
FFT_FLOOR = 1e-12
#: Below this many pairs the comparison is the stratified permutation test (granularity 1 / C(2n, n)).
PERMUTATION_MAX_PAIRS = 64
#: Monte Carlo draws of the permutation test: PERMUTATION_DRAWS_PER_LEVEL / level (at most).
PERMUTATION_DRAWS_PER_LEVEL = 5.0
#: Tolerance for treating a difference as an integer (relative to max(1, |D|)).
_INTEGER_TOL = 1e-9
_ALTERNATIVES = ("two-sided", "greater", "less")


def _magnitude_counts(magnitudes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    values, counts = np.unique(magnitudes[magnitudes > 0], return_counts=True)
    return values.astype(np.int64), counts.astype(np.int64)


def signflip_pmf(magnitudes: np.ndarray) -> np.ndarray:
    """pmf of T = sum of the magnitudes whose sign is +, over T = 0 .. sum(magnitudes).

    ``magnitudes``: non-negative integers (zeros carry no sign). T = sum_v v Binomial(m_v, 1/2)
    over the distinct values v with multiplicities m_v; S = 2 T - sum(magnitudes). Small laws
    by direct convolution (exact to rounding); large ones from the closed-form characteristic
    function prod_v ((1 + e^{i w v}) / 2)^{m_v} by one inverse FFT (absolute error ~1e-15).
    """
    mags = np.asarray(magnitudes)
    if mags.ndim != 1 or (mags.size and (mags.min() < 0 or not np.issubdtype(mags.dtype, np.integer))):
        raise ValueError("`magnitudes` must be a 1-D array of non-negative integers")
    values, counts = _magnitude_counts(mags)
    total = int((values * counts).sum())
    if total * total <= 2e7:  # direct convolution costs ~ total^2
        pmf = np.ones(1)
        for v, m in zip(values, counts):
            part = np.zeros(int(v) * int(m) + 1)
            part[:: int(v)] = stats.binom.pmf(np.arange(m + 1), m, 0.5)
            pmf = np.convolve(pmf, part)
        return pmf
    size = 1 << int(math.ceil(math.log2(total + 1)))
    half_w = math.pi * np.arange(size // 2 + 1) / size  # w / 2 at the FFT frequencies
    # (1 + e^{-i w v}) / 2 = e^{-i w v / 2} cos(w v / 2): sum the log |cos| and count the negative factors
    log_abs = np.zeros(half_w.size)
    negative = np.zeros(half_w.size)
    with np.errstate(divide="ignore"):
        for v, m in zip(values, counts):
            c = np.cos(half_w * float(v))
            log_abs += m * np.log(np.abs(c))
            negative += m * (c < 0)
    cf = np.exp(log_abs) * np.exp(1j * (np.pi * negative - half_w * total))
    pmf = np.fft.irfft(cf, n=size)[: total + 1]
    return np.clip(pmf, 0.0, None)


def signflip_sf_exact(magnitudes: np.ndarray, s: int) -> float:
    """P(S >= s) for S = sum eps_i m_i, integer magnitudes m_i, i.i.d. fair signs eps_i."""
    mags = np.asarray(magnitudes, dtype=np.int64)
    total = int(mags.sum())
    # S = 2 T - total >= s  <=>  T >= ceil((s + total) / 2)
    t0 = math.ceil((int(s) + total) / 2)
    if t0 <= 0:
        return 1.0
    if t0 > total:
        return 0.0
    pmf = signflip_pmf(mags)
    return float(min(1.0, pmf[t0:].sum()))


def grid_magnitudes(d: np.ndarray) -> tuple[np.ndarray, bool]:
    """Integer magnitudes k_i of the differences and whether they are the |D_i| themselves.

    Integer differences summing to at most EXACT_MAX_TOTAL are kept; otherwise
    k_i = round(|D_i| / delta), delta = sum |D| / min(ROUNDED_UNITS, UNITS_PER_PAIR x nonzero pairs)
    (a function of the magnitudes only).
    """
    a = np.abs(np.asarray(d, dtype=np.float64))
    if _is_integer(a) and a.sum() <= EXACT_MAX_TOTAL:
        return np.round(a).astype(np.int64), True
    delta = float(a.sum()) / min(ROUNDED_UNITS, UNITS_PER_PAIR * int(np.count_nonzero(a)))
    return np.round(a / delta).astype(np.int64), False


def _paired_iv(baseline: object, candidate: object, name: object, alternative: object) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(name, str) or not name:
        raise TypeError(f"`name` must be a non-empty string, got {name!r}")
    if alternative not in _ALTERNATIVES:
        raise ValueError(f"`alternative` must be one of {_ALTERNATIVES}, got {alternative!r}")
    out = [as_real_sample(x, label, min_size=0, context=name)
           for label, x in (("baseline", baseline), ("candidate", candidate))]
    if out[0].size != out[1].size:
        raise ValueError(f"`baseline` and `candidate` must be paired (equal lengths), got {out[0].size} and "
                         f"{out[1].size} ({name}); pair rows with pair_rows_by_prompt")
    return out[0], out[1]


def _is_integer(d: np.ndarray) -> bool:
    return bool(np.all(np.abs(d - np.round(d)) <= _INTEGER_TOL * np.maximum(1.0, np.abs(d))))


def paired_comparison(baseline: np.ndarray, candidate: np.ndarray, *, name: str,
                      alternative: str = "two-sided") -> ComparisonResult:
    """Sign-flip test of paired row scores: is the candidate's score shifted from the baseline's?

    baseline[i], candidate[i]: the score of the i-th baseline and i-th candidate row of the
    same prompt (pair them with :func:`pair_rows_by_prompt`). Statistic: Z = sum D / ||D||,
    D = candidate - baseline. ``alternative="greater"``: the candidate's score is larger.
    The p-value is the sign-flip p of the grid statistic (module docstring): valid
    conditional on |D|, hence unconditionally, at every level and every n.
    """
    b, c = _paired_iv(baseline, candidate, name, alternative)
    d = c - b
    n = int(d.size)
    informative = int(np.count_nonzero(d))
    s1 = float(d.sum())
    s2 = float(np.dot(d, d))
    common = dict(name=name, n_pairs=n, n_informative=informative, mean_difference=s1 / n if n else 0.0,
                  rms_difference=math.sqrt(s2 / n) if n else 0.0,
                  baseline_mean=float(b.mean()) if n else 0.0, candidate_mean=float(c.mean()) if n else 0.0,
                  alternative=alternative)
    k, integral = grid_magnitudes(d) if informative else (np.zeros(0, dtype=np.int64), True)
    if not k.any():
        return ComparisonResult(statistic=0.0, pvalue=1.0, method="degenerate", **common)
    s_grid = int(np.dot(np.sign(d).astype(np.int64), k))
    z_grid = s_grid / math.sqrt(float(np.dot(k, k)))
    side = {"two-sided": abs(z_grid), "greater": z_grid, "less": -z_grid}[alternative]
    tail = signflip_tail_bound(side)
    method = "sign-flip Gaussian bound"
    sides = 2.0 if alternative == "two-sided" else 1.0
    if sides * tail < EXACT_BELOW and side > 0:
        s_side = {"two-sided": abs(s_grid), "greater": s_grid, "less": -s_grid}[alternative]
        tail = min(tail, max(signflip_sf_exact(k, s_side), FFT_FLOOR))
        method = "exact sign-flip" if integral else "exact sign-flip (scores on a grid)"
    p = 1.0 if side <= 0 and alternative == "two-sided" else min(1.0, sides * tail)
    return ComparisonResult(statistic=s1 / math.sqrt(s2), pvalue=float(p), method=method, **common)


def pooled_comparison(differences: Sequence[np.ndarray], *, name: str,
                      alternative: str = "two-sided") -> PooledComparisonResult:
    """One row score's paired differences of several cases, tested together: is any case's score shifted?

    differences[c]: the pair differences D = candidate - baseline of case c (one row score,
    pairs as for :func:`paired_comparison`). The test is the sign-flip test of every case's
    pairs at once, each pair weighing the same: Z = sum of all D / ||all D||, i.e. the cases'
    own z_c combined with weights ||D_c|| (a case with more pairs, more tokens per row or a
    larger score spread weighs more). The weights depend on the magnitudes only, so given
    every |D| the signs are still i.i.d. fair coins under the intersection null (no case
    shifted) and the p-value is valid at every level, whatever the oracle's error. A bug
    that moves every generated token a little in the same direction adds up here while no
    single case reaches the Holm level; with the same drift and spread per token, equal
    weight per pair is the most powerful such combination (the most informative case counts most).
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"`name` must be a non-empty string, got {name!r}")
    if alternative not in _ALTERNATIVES:
        raise ValueError(f"`alternative` must be one of {_ALTERNATIVES}, got {alternative!r}")
    if isinstance(differences, np.ndarray) or not isinstance(differences, Sequence):
        raise TypeError(f"`differences` must be a sequence of arrays (one per case), got "
                        f"{type(differences).__name__} ({name})")
    parts, zs, pairs = [], [], 0
    for i, raw in enumerate(differences):
        d = as_real_sample(raw, f"differences[{i}]", min_size=0, context=name)
        pairs += int(d.size)
        norm = math.sqrt(float(np.dot(d, d)))
        if norm == 0.0:
            zs.append(0.0)
            continue
        zs.append(float(d.sum()) / norm)
        parts.append(d)
    if not parts:
        return PooledComparisonResult(name=name, statistic=0.0, pvalue=1.0, n_cases=0, n_pairs=pairs,
                                      case_statistics=tuple(zs), method="degenerate", alternative=alternative)
    w = np.concatenate(parts)
    res = paired_comparison(np.zeros_like(w), w, name=name, alternative=alternative)
    return PooledComparisonResult(name=name, statistic=res.statistic, pvalue=res.pvalue, n_cases=len(parts),
                                  n_pairs=pairs, case_statistics=tuple(zs), method=f"pooled {res.method}",
                                  alternative=alternative)


def _grid_pvalues(k: np.ndarray, integral: bool, alternative: str) -> tuple[np.ndarray, np.ndarray]:
    """Every value s of the grid statistic S' given the magnitudes k, its probability, and paired_comparison's p there."""
    total = int(k.sum())
    pmf = signflip_pmf(k)
    s = 2 * np.arange(total + 1) - total
    norm = math.sqrt(float(np.dot(k, k)))
    side = {"two-sided": np.abs(s), "greater": s, "less": -s}[alternative]
    bound = np.minimum(1.0, BD_CONSTANT * stats.norm.sf(side / norm))
    bound = np.where(side > 0, np.minimum(bound, 0.5), bound)
    sf = np.cumsum(pmf[::-1])[::-1]  # P(T >= t)
    t0 = np.clip(np.ceil((side + total) / 2).astype(np.int64), 0, total + 1)
    exact = np.where(t0 > total, 0.0, sf[np.minimum(t0, total)])
    exact = np.where(t0 <= 0, 1.0, exact)
    sides = 2.0 if alternative == "two-sided" else 1.0
    use_exact = (sides * bound < EXACT_BELOW) & (side > 0)
    tail = np.where(use_exact, np.minimum(bound, np.maximum(exact, FFT_FLOOR)), bound)
    p = np.minimum(1.0, sides * tail)
    if alternative == "two-sided":
        p = np.where(side <= 0, 1.0, p)
    return pmf, p


def conditional_size(d: np.ndarray, levels: tuple[float, ...], alternative: str = "two-sided") -> np.ndarray:
    """P(paired_comparison's p <= level) over fair signs, given the magnitudes |d|: one value per level.

    Exact (the law of the grid statistic), so a calibration can average it over draws of the
    magnitudes (a Rao-Blackwellised size estimate: no rare-event simulation at 2e-5).
    """
    dd = np.asarray(d, dtype=np.float64)
    if alternative not in _ALTERNATIVES:
        raise ValueError(f"`alternative` must be one of {_ALTERNATIVES}, got {alternative!r}")
    if not np.count_nonzero(dd):
        return np.zeros(len(levels))
    k, integral = grid_magnitudes(dd)
    if not k.any():
        return np.zeros(len(levels))
    pmf, p = _grid_pvalues(k, integral, alternative)
    return np.array([float(pmf[p <= a].sum()) for a in levels])


def permutation_comparison(baseline: np.ndarray, candidate: np.ndarray, *, name: str, level: float,
                           rng: np.random.Generator, baseline_strata: np.ndarray | None = None,
                           candidate_strata: np.ndarray | None = None) -> ComparisonResult:
    """Exact stratified permutation test of row scores: is the candidate's total shifted from the baseline's?

    baseline / candidate: one score per row (unpaired; any sizes); strata: the prompt of each
    row (default: one stratum). Statistic |sum over candidate rows of (w - stratum mean)|, its
    null law by shuffling the engine labels within each stratum (exact under H0: the rows of a
    prompt are exchangeable between the engines). p = (1 + exceedances) / (1 + draws), at most
    PERMUTATION_DRAWS_PER_LEVEL / level draws, stopped after 20 exceedances: a valid p-value
    that resolves ``level``. The reported Z is the statistic over its permutation standard deviation.
    """
    b, c = _unpaired_iv(baseline, candidate, name)
    level = check_level(level, "level")
    rng = check_rng(rng)
    sb = np.zeros(b.size, dtype=np.int64) if baseline_strata is None else np.asarray(baseline_strata, dtype=np.int64)
    sc = np.zeros(c.size, dtype=np.int64) if candidate_strata is None else np.asarray(candidate_strata, dtype=np.int64)
    if sb.shape != b.shape or sc.shape != c.shape:
        raise ValueError(f"strata must give one prompt per row ({name})")
    groups, observed, var = [], 0.0, 0.0
    for j in np.union1d(np.unique(sb), np.unique(sc)):
        pooled = np.concatenate([b[sb == j], c[sc == j]])
        k, total = int((sc == j).sum()), pooled.size
        if k == 0 or k == total:
            continue
        centred = pooled - pooled.mean()
        observed += float(centred[total - k:].sum())
        var += k * (total - k) / (total * (total - 1)) * float(np.dot(centred, centred)) if total > 1 else 0.0
        groups.append((centred, k))
    n_pairs = min(b.size, c.size)
    diff = float(c.mean() - b.mean()) if b.size and c.size else 0.0
    common = dict(name=name, n_pairs=n_pairs, n_informative=n_pairs, mean_difference=diff,
                  rms_difference=math.sqrt(2.0 * var / max(1, n_pairs)) if n_pairs else 0.0,
                  baseline_mean=float(b.mean()) if b.size else 0.0, candidate_mean=float(c.mean()) if c.size else 0.0)
    if var <= 0:
        return ComparisonResult(statistic=0.0, pvalue=1.0, method="degenerate", **common)

    def draw(size: int) -> np.ndarray:
        tot = np.zeros(size)
        for centred, k in groups:
            pick = np.argpartition(rng.random((size, centred.size)), k - 1, axis=1)[:, :k]
            tot += centred[pick].sum(axis=1)
        return np.abs(tot)

    draws = max(1, math.ceil(PERMUTATION_DRAWS_PER_LEVEL / level))
    p, used = sequential_mc_pvalue(abs(observed), draw, draws, cells_per_draw=sum(g[0].size for g in groups))
    return ComparisonResult(statistic=observed / math.sqrt(var), pvalue=float(p),
                            method=f"stratified permutation ({used} draws)", **common)


def _unpaired_iv(baseline: object, candidate: object, name: object) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(name, str) or not name:
        raise TypeError(f"`name` must be a non-empty string, got {name!r}")
    out = []
    for label, x in (("baseline", baseline), ("candidate", candidate)):
        arr = np.asarray(x, dtype=np.float64)
        if arr.ndim != 1 or not np.all(np.isfinite(arr)):
            raise ValueError(f"`{label}` must be a 1-D array of finite scores ({name})")
        out.append(arr)
    return out[0], out[1]


def pair_rows_by_prompt(baseline_prompt: np.ndarray, candidate_prompt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Indices (baseline rows, candidate rows) pairing the k-th row of prompt j in each engine.

    Rows are paired in collection order within each prompt, which depends on nothing but the
    layout, so the pairing is fixed before any score is seen. Rows beyond the smaller count
    of a prompt are left unpaired.
    """
    pa = np.asarray(baseline_prompt)
    pb = np.asarray(candidate_prompt)
    if pa.ndim != 1 or pb.ndim != 1 or not (np.issubdtype(pa.dtype, np.integer) and np.issubdtype(pb.dtype, np.integer)):
        raise ValueError("`baseline_prompt` and `candidate_prompt` must be 1-D integer arrays (prompt index per row)")
    ia, ib = [], []
    for j in np.union1d(np.unique(pa), np.unique(pb)):
        ra, rb = np.flatnonzero(pa == j), np.flatnonzero(pb == j)
        k = min(ra.size, rb.size)
        ia.append(ra[:k])
        ib.append(rb[:k])
    if not ia:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    order_a, order_b = np.concatenate(ia), np.concatenate(ib)
    keep = np.argsort(np.maximum(order_a, order_b), kind="stable")  # collection order of the later row
    return order_a[keep].astype(np.int64), order_b[keep].astype(np.int64)


def row_sums(values: np.ndarray, rows: np.ndarray, n_rows: int) -> np.ndarray:
    """Per-row sums of token values: out[r] = sum of values[i] over tokens i with rows[i] == r."""
    v = np.asarray(values, dtype=np.float64)
    r = np.asarray(rows)
    if v.shape != r.shape or v.ndim != 1:
        raise ValueError(f"`values` and `rows` must be 1-D of equal length, got {v.shape} and {r.shape}")
    if r.size and (r.min() < 0 or r.max() >= n_rows):
        raise ValueError(f"`rows` must lie in [0, {n_rows})")
    return np.bincount(r.astype(np.int64), weights=v, minlength=n_rows)[:n_rows]


# --- support: rows with a token the oracle says is impossible ---------------------------------

def _strata_iv(flags: object, strata: object, label: str) -> tuple[np.ndarray, np.ndarray]:
    f = np.asarray(flags)
    if f.ndim != 1 or f.dtype != bool:
        raise TypeError(f"`{label}` must be a 1-D boolean array (one flag per row), got {f.dtype} {f.shape}")
    if strata is None:
        return f, np.zeros(f.size, dtype=np.int64)
    s = np.asarray(strata)
    if s.shape != f.shape or not np.issubdtype(s.dtype, np.integer):
        raise ValueError(f"the strata of `{label}` must be an integer array of shape {f.shape}")
    return f, s.astype(np.int64)


def _hypergeom_sum_sf(strata: list[tuple[int, int, int]], t: int) -> float:
    """P(sum_j T_j >= t), T_j ~ Hypergeom(N_j total rows, M_j flagged, n_j drawn) independent."""
    pmf = np.ones(1)
    for total, flagged, drawn in strata:
        lo, hi = max(0, drawn - (total - flagged)), min(flagged, drawn)
        part = np.zeros(hi + 1)
        part[lo:] = stats.hypergeom.pmf(np.arange(lo, hi + 1), total, flagged, drawn)
        pmf = np.convolve(pmf, part)
    if t <= 0:
        return 1.0
    return float(min(1.0, pmf[t:].sum())) if t < pmf.size else 0.0


def support_comparison(baseline_flags: np.ndarray, candidate_flags: np.ndarray, *,
                       baseline_strata: np.ndarray | None = None,
                       candidate_strata: np.ndarray | None = None) -> SupportComparisonResult:
    """Exact one-sided test: does the candidate have more rows with an impossible token than the baseline?

    flags: per row, True when the row holds a token of probability 0 under the oracle.
    strata: per row, the prompt it continues (rows of different prompts have different laws).
    Under H0 the rows of a prompt are exchangeable between the engines, so given each
    prompt's pooled count of flagged rows the candidate's count is a sum of independent
    hypergeometric counts (Fisher's exact test, stratified): the p-value is exact.
    """
    fb, sb = _strata_iv(baseline_flags, baseline_strata, "baseline_flags")
    fc, sc = _strata_iv(candidate_flags, candidate_strata, "candidate_flags")
    layout = []
    for j in np.union1d(np.unique(sb), np.unique(sc)):
        nb, nc = int((sb == j).sum()), int((sc == j).sum())
        mb, mc = int(fb[sb == j].sum()), int(fc[sc == j].sum())
        if mb + mc:
            layout.append((nb + nc, mb + mc, nc))
    kb, kc = int(fb.sum()), int(fc.sum())
    p = _hypergeom_sum_sf(layout, kc) if layout else 1.0
    return SupportComparisonResult(statistic=kc, pvalue=p, baseline_rows=int(fb.size), candidate_rows=int(fc.size),
                                   baseline_flagged=kb, candidate_flagged=kc)
