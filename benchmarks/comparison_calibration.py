"""Sizes at the Holm levels (1e-3, 1e-4, 2e-5) by exact enumeration or exponential tilting.

Blind replicates cannot see 2e-5 (10^6 draws give a 3-sigma band of 1.4x nominal). This script
measures the sizes of

- the one-sample martingale z-tests (speceq.stats.martingale), with the old validity rule
  (summed variance >= 50, skewness-corrected normal p) and the new one (effective jumps
  n_eff >= 30, else the scale-free e-process p), on laws where rare large jumps dominate:
  exactly, by enumerating the binomial count of a two-point law, or by importance sampling
  with exponentially tilted laws (a defensive mixture of tilts aimed at z = +-3.3 and +-4.3,
  every replicate a full token path so the e-process fallback is computed as in the function);
- the candidate-vs-baseline comparisons (speceq.stats.comparison) in the same cells (rows
  of 4 tokens, both engines drawing the cell's law): the size given the pair magnitudes is
  exact (:func:`speceq.stats.comparison.conditional_size`), so its average over R draws of
  the magnitudes estimates the size with a relative standard error below 1 / sqrt(R) at every
  level (Rao-Blackwellised, no rare events needed);
- the same comparisons (and the one-sample z-tests, for contrast) in the three worlds of
  issue #22 where both engines share a slightly wrong oracle (speceq.stats.synthetic);
- the run-level pooled comparisons (speceq.stats.pooled_comparison) in the same worlds, over
  cases that all share the world's error: every case's differences as they are (each pair
  weighing the same), the size given those magnitudes exact as above.

Usage::

    python benchmarks/comparison_calibration.py                       # every part (~10 min on 1 core)
    python benchmarks/comparison_calibration.py --parts one-sample --reps 20000
    python benchmarks/comparison_calibration.py --parts worlds --outer 500
    python benchmarks/comparison_calibration.py --parts pooled --pooled-cases 6 --world-outer 200
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

from speceq.stats import comparison as cmp
from speceq.stats.martingale import MIN_EFFECTIVE_JUMPS
from speceq.stats.oracle_rows import COMPARISONS, row_scores
from speceq.stats.scores import DRAFT_RATIO_CAP
from speceq.stats.sequential import scale_free_mixture_log_e
from speceq.stats.synthetic import MISMATCH_WORLDS, mismatch_world

LEVELS = (1e-3, 1e-4, 2e-5)
OLD_MIN_SUMMED_VARIANCE = 50.0
ROW_TOKENS = 4
PARTS = ("one-sample", "comparisons", "worlds", "pooled")


# ------------------------------------------------------------------------------- cells
@dataclass(frozen=True)
class Cell:
    """i.i.d. tokens from ``p`` (the oracle's law, exact here); the test's score f per token.

    predictable: the oracle gives the fourth moments (True) or the function estimates them
    from the observed fourth powers (False: the log-ratio draft drift).
    comparison: the row score of the two-sample comparison in the same cell ("log q - log p":
    the cell's own unbounded score, to show the comparison's validity does not need bounds).
    """

    name: str
    test: str
    p: np.ndarray
    f: np.ndarray
    n: int
    predictable: bool
    comparison: str


def _two_point(r: float) -> np.ndarray:
    return np.array([1.0 - r, r])


def _moments(p: np.ndarray, f: np.ndarray) -> tuple[float, float, float]:
    mu = float(p @ f)
    d = f - mu
    return mu, float(p @ d**2), float(p @ d**4)


def _n_for_variance(p: np.ndarray, f: np.ndarray, v_total: float) -> int:
    return int(round(v_total / _moments(p, f)[1]))


def _draft_cell(name: str, outside: float, n: int, ratio: bool) -> Cell:
    """A target law over 16 Zipf tokens plus one token of mass ``outside`` the draft never proposes."""
    base = 1.0 / np.arange(1, 17) ** 1.1
    base /= base.sum()
    p = np.r_[base * (1.0 - outside), outside]
    q_in = base ** (1 / 1.3)
    q = np.r_[q_in / q_in.sum(), 0.0]  # the draft: hotter, and truncated (q = 0 outside)
    if ratio:
        f = np.where(p > 0, np.minimum(q / p, DRAFT_RATIO_CAP), DRAFT_RATIO_CAP)
        return Cell(name, "draft ratio", p, f, n, True, "draft ratio")
    f = np.log(np.maximum(q, 1e-30)) - np.log(p)
    return Cell(name, "draft drift (log q - log p)", p, f, n, False, "log q - log p")


def _truncated_draft_cell(ratio: bool, n: int = 1200) -> Cell:
    """A draft truncated to its top 8 of 20 tokens (top-k on the draft); the target puts ~4 % outside them."""
    base = 1.0 / np.arange(1, 21) ** 2.0
    base /= base.sum()
    q = np.where(np.arange(20) < 8, base ** (1 / 1.2), 0.0)
    q /= q.sum()
    p = base
    name = f"truncated draft (top 8 of 20; p outside {p[8:].sum():.3f}), N={n}"
    if ratio:
        f = np.minimum(q / p, DRAFT_RATIO_CAP)
        return Cell(name, "draft ratio", p, f, n, True, "draft ratio")
    f = np.log(np.maximum(q, 1e-30)) - np.log(p)
    return Cell(name, "draft drift (log q - log p)", p, f, n, False, "log q - log p")


def default_cells() -> list[Cell]:
    """The cells of issue #22 section 2 and the near-guard laws around both rules' thresholds."""
    cells = []
    for r, v in ((1e-4, 55.0), (1e-3, 55.0), (1e-2, 55.0)):
        p = _two_point(r)
        f = np.log(p)
        cells.append(Cell(f"two-point {{1-r, r}}, r={r:g}, summed variance {v:g}", "temperature drift", p, f,
                          _n_for_variance(p, f, v), True, "log-likelihood"))
    for lam in (25.0, 30.0, 40.0):  # near the new threshold n_eff = 30 (n_eff ~ n r on two-point laws)
        r = 1e-2
        p = _two_point(r)
        cells.append(Cell(f"two-point, r={r:g}, n_eff ~ {lam:g} (N={int(lam / r)})", "temperature drift", p, np.log(p),
                          int(lam / r), True, "log-likelihood"))
    m = 0.999
    p = np.array([m, 1 - m])
    cells.append(Cell("argmax, max p = 0.999, summed variance 55 (near the old guard)", "argmax leak", p,
                      np.array([1.0, 0.0]), int(round(55 / (m * (1 - m)))), True, "argmax"))
    peaked = np.r_[0.97, np.full(30, 0.03 / 30)]
    cells.append(Cell("peaked, top-1 0.97 + 30 tokens, N=1200", "temperature drift", peaked, np.log(peaked), 1200, True,
                      "log-likelihood"))
    cells.append(_draft_cell("draft drift: a token outside the draft's support, 0.1 per case (N=1200)", 0.1 / 1200,
                             1200, ratio=False))
    cells.append(_draft_cell("draft ratio: a token outside the draft's support, 0.1 per case (N=1200)", 0.1 / 1200,
                             1200, ratio=True))
    cells.append(_truncated_draft_cell(False))
    cells.append(_truncated_draft_cell(True))
    return cells


# ------------------------------------------------------------------- one-sample p-values
def _skew_corrected(z: np.ndarray, g: np.ndarray) -> np.ndarray:
    normal = stats.norm.sf(np.abs(z))
    corr = stats.norm.pdf(z) * g * (z * z - 1.0) / 6.0
    tail = np.where(z >= 0, normal + corr, normal - corr)
    return np.minimum(1.0, 2.0 * np.maximum(tail, normal))


def one_sample_pvalues(cell: Cell, dev: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(old rule p, new rule p) for token paths ``dev`` ([reps, n] increments f - mu), as martingale_z computes them."""
    _, v, m4 = _moments(cell.p, cell.f)
    n = dev.shape[1]
    total = n * v
    z = dev.sum(axis=1) / math.sqrt(total)
    g = (dev**3).sum(axis=1) / total**1.5
    normal = _skew_corrected(z, g)
    old = np.where(total < OLD_MIN_SUMMED_VARIANCE, 1.0, normal)
    fourth = np.full(dev.shape[0], n * m4) if cell.predictable else (dev**4).sum(axis=1)
    guard = total * total < MIN_EFFECTIVE_JUMPS * fourth
    new = normal.copy()
    rows = np.flatnonzero(guard)
    for s in range(0, rows.size, max(1, 2_000_000 // n)):
        idx = rows[s: s + max(1, 2_000_000 // n)]
        top = scale_free_mixture_log_e(dev[idx], np.full((idx.size, n), v)).max(axis=1)
        new[idx] = np.minimum(1.0, np.exp(-np.maximum(0.0, top)))
    return old, new


def exact_two_valued(cell: Cell) -> dict[str, list[float] | None] | None:
    """Exact size / nominal when f takes two values on the support: the sum is a function of a binomial count.

    Returns {"old": sizes, "new": sizes or None (None: the new rule takes the e-process path,
    whose p depends on the token order)}; None when f has more than two values.
    """
    live = cell.p > 0
    values = np.unique(cell.f[live])
    if values.size != 2:
        return None
    mu, v, m4 = _moments(cell.p, cell.f)
    n = cell.n
    r = float(cell.p[live & (cell.f == values[1])].sum())
    hi = min(n, int(n * r + 40 * math.sqrt(n * r + 1) + 60))
    lo = max(0, int(n * r - 40 * math.sqrt(n * r + 1) - 60))
    k = np.arange(lo, hi + 1)
    w = stats.binom.pmf(k, n, r)
    d1, d0 = values[1] - mu, values[0] - mu
    total = n * v
    p = _skew_corrected((k * d1 + (n - k) * d0) / math.sqrt(total), (k * d1**3 + (n - k) * d0**3) / total**1.5)
    old = np.where(total < OLD_MIN_SUMMED_VARIANCE, 1.0, p)
    sizes = {"old": [float(w[old <= a].sum() / a) for a in LEVELS], "new": None}
    if cell.predictable and total * total >= MIN_EFFECTIVE_JUMPS * n * m4:
        sizes["new"] = [float(w[p <= a].sum() / a) for a in LEVELS]
    return sizes


def _tilts(cell: Cell, targets: Sequence[float]) -> list[float]:
    """theta with n E_theta[d] = target * sqrt(n v) for each reachable target (d = f - mu)."""
    mu, v, _ = _moments(cell.p, cell.f)
    d = cell.f - mu
    live = cell.p > 0
    out = []
    for target in targets:
        want = target * math.sqrt(v / cell.n)  # per-token tilted mean

        def mean_at(theta: float, want: float = want) -> float:
            w = np.where(live, np.log(np.where(live, cell.p, 1.0)) + theta * d, -np.inf)
            w = np.exp(w - w[live].max())
            return float((w * d).sum() / w.sum()) - want

        if not (d[live].min() < want < d[live].max()):
            continue
        lo, hi = (-1.0, 0.0) if want < 0 else (0.0, 1.0)
        while mean_at(lo) > 0:
            lo *= 2
        while mean_at(hi) < 0:
            hi *= 2
        out.append(float(optimize.brentq(mean_at, lo, hi, xtol=1e-12)))
    return out


def tilted_sizes(cell: Cell, reps: int, rng: np.random.Generator) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Importance-sampled size of the old and new rule at LEVELS: rule -> (estimate, standard error)."""
    mu, v, _ = _moments(cell.p, cell.f)
    d = cell.f - mu
    thetas = [0.0, *_tilts(cell, (3.3, -3.3, 4.3, -4.3))]
    live = cell.p > 0
    logp = np.where(live, np.log(np.where(live, cell.p, 1.0)), -np.inf)
    laws, log_m = [], []
    for th in thetas:
        w = np.where(live, logp + th * d, -np.inf)
        top = w[live].max()
        log_m.append(float(top + np.log(np.exp(w[live] - top).sum())))
        laws.append(np.exp(w - log_m[-1]))
    est = {"old": [], "new": []}
    chunk = max(1, 4_000_000 // cell.n)
    done = 0
    while done < reps:
        size = min(chunk, reps - done)
        comp = rng.integers(0, len(thetas), size=size)
        tokens = np.empty((size, cell.n), dtype=np.int64)
        for j, law in enumerate(laws):
            rows = np.flatnonzero(comp == j)
            if rows.size:
                tokens[rows] = rng.choice(cell.p.size, size=(rows.size, cell.n), p=law)
        dev = d[tokens]
        s = dev.sum(axis=1)
        # weight = p^n / mixture density = 1 / mean_j exp(theta_j S - n log M_j)
        expo = np.stack([th * s - cell.n * lm for th, lm in zip(thetas, log_m)])
        top = expo.max(axis=0)
        weight = np.exp(-(top + np.log(np.exp(expo - top).mean(axis=0))))
        old, new = one_sample_pvalues(cell, dev)
        for rule, pv in (("old", old), ("new", new)):
            est[rule].append(np.stack([weight * (pv <= a) for a in LEVELS], axis=1))
        done += size
    out = {}
    for rule, parts in est.items():
        x = np.concatenate(parts)
        out[rule] = (x.mean(axis=0), x.std(axis=0, ddof=1) / math.sqrt(x.shape[0]))
    return out


# --------------------------------------------------------------------- comparison sizes
def _row_score(cell: Cell, tokens: np.ndarray) -> np.ndarray:
    """Row scores of the comparison of ``cell`` for rows ``tokens`` ([rows, ROW_TOKENS])."""
    p = cell.p
    if cell.comparison == "argmax":
        top = int(np.argmax(p))
        per = (tokens == top) - p[top]
    elif cell.comparison == "log-likelihood":
        logp = np.where(p > 0, np.log(np.where(p > 0, p, 1.0)), -np.inf)
        mu = float(p[p > 0] @ logp[p > 0])
        per = np.maximum(logp[tokens] - mu, -10.0)
    else:
        per = cell.f[tokens] - float(p @ cell.f)
    return per.sum(axis=1)


def comparison_sizes(cell: Cell, outer: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Rao-Blackwellised size of the cell's comparison: (mean of exact conditional sizes, standard error)."""
    rows = max(1, cell.n // ROW_TOKENS)
    sizes = np.empty((outer, len(LEVELS)))
    for i in range(outer):
        tb = rng.choice(cell.p.size, size=(rows, ROW_TOKENS), p=cell.p)
        tc = rng.choice(cell.p.size, size=(rows, ROW_TOKENS), p=cell.p)
        sizes[i] = cmp.conditional_size(_row_score(cell, tc) - _row_score(cell, tb), LEVELS)
    return sizes.mean(axis=0), sizes.std(axis=0, ddof=1) / math.sqrt(outer)


# ---------------------------------------------------------------------------- worlds
def _support_conditional_size(flag_b: np.ndarray, flag_c: np.ndarray) -> np.ndarray:
    """Exact size of the support comparison given the pooled count of flagged rows (one prompt)."""
    total, flagged, drawn = flag_b.size + flag_c.size, int(flag_b.sum() + flag_c.sum()), flag_c.size
    if flagged == 0:
        return np.zeros(len(LEVELS))
    t = np.arange(0, min(flagged, drawn) + 1)
    pmf = stats.hypergeom.pmf(t, total, flagged, drawn)
    sf = stats.hypergeom.sf(t - 1, total, flagged, drawn)
    return np.array([float(pmf[sf <= a].sum()) for a in LEVELS])


def world_sizes(name: str, outer: int, rows: int, rng: np.random.Generator) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per test: (size estimate at LEVELS, standard error) when both engines share the world's oracle error.

    Comparisons: Rao-Blackwellised (exact given the magnitudes / pooled counts). One-sample
    z-tests and the one-sample support check: plain rejection rates of the candidate against the oracle.
    """
    from speceq import stats as S

    world = mismatch_world(name)
    res: dict[str, list[np.ndarray]] = {}

    def add(key: str, value: np.ndarray) -> None:
        res.setdefault(key, []).append(np.asarray(value, dtype=np.float64))

    for _ in range(outer):
        tb, lb = world.sample(rng, rows, ROW_TOKENS)
        tc, lc = world.sample(rng, rows, ROW_TOKENS)
        sb, sc = world.score(tb, lb), world.score(tc, lc)
        wb, wc = row_scores(sb, rows), row_scores(sc, rows)
        for k in COMPARISONS:
            if k in wb:
                add(f"comparison: {k}", cmp.conditional_size(wc[k] - wb[k], LEVELS))
        add("comparison: support (rows with an impossible token)",
            _support_conditional_size(np.isin(np.arange(rows), sb.row[sb.prob <= 0]),
                                      np.isin(np.arange(rows), sc.row[sc.prob <= 0])))
        for label, fn in (("one-sample z argmax leak", S.argmax_leak_z), ("one-sample z temperature drift",
                          S.temperature_drift_z), ("one-sample z draft ratio", S.draft_ratio_z)):
            add(label, np.array([fn(sc).pvalue <= a for a in LEVELS]))
        add("one-sample support (hard failure today)", np.full(len(LEVELS), float((sc.prob <= 0).any())))
    return {k: (np.mean(v, axis=0), np.std(v, axis=0, ddof=1) / math.sqrt(len(v))) for k, v in res.items()}


def pooled_world_sizes(name: str, outer: int, rows: int, cases: int,
                       rng: np.random.Generator) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per row score: Rao-Blackwellised size of its comparison pooled over ``cases`` cases of the world.

    Every case is an independent draw of ``rows`` rows per engine from the world, so all cases
    share the same error with the oracle (the worst case for pooling: the offsets line up).
    The pooled test is the sign-flip test of the concatenated D_c (every pair weighing the
    same), as in :func:`speceq.stats.pooled_comparison`, so its size given the magnitudes is exact.
    """
    world = mismatch_world(name)
    res: dict[str, list[np.ndarray]] = {}
    for _ in range(outer):
        parts: dict[str, list[np.ndarray]] = {}
        for _c in range(cases):
            tb, lb = world.sample(rng, rows, ROW_TOKENS)
            tc, lc = world.sample(rng, rows, ROW_TOKENS)
            wb, wc = row_scores(world.score(tb, lb), rows), row_scores(world.score(tc, lc), rows)
            for k in COMPARISONS:
                if k in wb:
                    d = wc[k] - wb[k]
                    if float(d @ d) > 0:
                        parts.setdefault(k, []).append(d)
        for k, ds in parts.items():
            res.setdefault(f"pooled {k} comparison", []).append(cmp.conditional_size(np.concatenate(ds), LEVELS))
    return {k: (np.mean(v, axis=0), np.std(v, axis=0, ddof=1) / math.sqrt(len(v))) for k, v in res.items()}


# ---------------------------------------------------------------------------- output
def _fmt(est: np.ndarray, se: np.ndarray | None) -> list[str]:
    out = []
    for a, e, s in zip(LEVELS, est, se if se is not None else [None] * len(LEVELS)):
        if s is None:
            out.append(f"{e:.2f}")
        else:
            out.append(f"{e / a:.3f} ± {3 * s / a:.3f}")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of: {', '.join(PARTS)}")
    ap.add_argument("--reps", type=int, default=20_000, help="importance-sampled paths per one-sample cell")
    ap.add_argument("--outer", type=int, default=2_000, help="magnitude draws per comparison cell")
    ap.add_argument("--world-outer", type=int, default=400, help="replicates per world (3 000 rows x 4 tokens)")
    ap.add_argument("--world-rows", type=int, default=3000)
    ap.add_argument("--pooled-cases", type=int, default=6, help="cases per run of the pooled part")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default="", help="keep the cells whose name contains one of these (comma-separated)")
    args = ap.parse_args(argv)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    t0 = time.time()

    def say(msg: str) -> None:
        print(f"[{time.time() - t0:6.0f} s] {msg}", file=sys.stderr, flush=True)

    seeds = iter(np.random.SeedSequence(args.seed).spawn(1000))
    cells = default_cells()
    if args.only:
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        cells = [c for c in cells if any(w in c.name for w in wanted)]
    if "one-sample" in parts:
        print("\n## One-sample z-tests: size / nominal (old rule: summed variance >= 50; new: n_eff >= 30, "
              "else e-process)\n")
        print("| test | law | N | n_eff | old rule, exact: 1e-3 / 1e-4 / 2e-5 | old rule, tilted (± 3 SE) | new rule, "
              "exact | new rule, tilted (± 3 SE) |")
        print("|---|---|---|---|---|---|---|---|")
        for cell in cells:
            say(cell.name)
            _, v, m4 = _moments(cell.p, cell.f)
            exact = exact_two_valued(cell)
            tilt = tilted_sizes(cell, args.reps, np.random.default_rng(next(seeds)))
            neff = cell.n * v * v / m4 if m4 > 0 else math.inf
            ex_old = " / ".join(f"{x:.2f}" for x in exact["old"]) if exact else "—"
            ex_new = " / ".join(f"{x:.2f}" for x in exact["new"]) if exact and exact["new"] else "—"
            how = "" if cell.predictable else " (the function uses the observed d^4)"
            print(f"| {cell.test} | {cell.name} | {cell.n} | {neff:.3g}{how} | {ex_old} | "
                  f"{' / '.join(_fmt(*tilt['old']))} | {ex_new} | {' / '.join(_fmt(*tilt['new']))} |", flush=True)
    if "comparisons" in parts:
        print(f"\n## Comparisons in the same cells: rows of {ROW_TOKENS} tokens, both engines exact; size / nominal "
              "(Rao-Blackwellised, ± 3 SE)\n")
        print("| comparison | law | rows per engine | 1e-3 | 1e-4 | 2e-5 |")
        print("|---|---|---|---|---|---|")
        for cell in cells:
            say(f"comparison {cell.name}")
            est, se = comparison_sizes(cell, args.outer, np.random.default_rng(next(seeds)))
            print(f"| {cell.comparison} | {cell.name} | {cell.n // ROW_TOKENS} | " + " | ".join(_fmt(est, se)) + " |",
                  flush=True)
    if "worlds" in parts:
        print(f"\n## Worlds with a slightly wrong oracle (both engines correct, {args.world_rows} rows x "
              f"{ROW_TOKENS} tokens each, {args.world_outer} replicates)\n")
        print("Comparisons: size / nominal (Rao-Blackwellised, ± 3 SE). One-sample tests of the candidate "
              "against the oracle: the fraction of replicates rejected.\n")
        print("| world | test | 1e-3 | 1e-4 | 2e-5 |")
        print("|---|---|---|---|---|")
        for name in MISMATCH_WORLDS:
            say(f"world {name}")
            for test, (est, se) in world_sizes(name, args.world_outer, args.world_rows,
                                               np.random.default_rng(next(seeds))).items():
                cells_txt = _fmt(est, se) if test.startswith("comparison") else [f"{e:.3f}" for e in est]
                print(f"| {name} | {test} | " + " | ".join(cells_txt) + " |", flush=True)
    if "pooled" in parts:
        print(f"\n## Pooled over {args.pooled_cases} cases that share the world's oracle error ({args.world_rows} rows "
              f"x {ROW_TOKENS} tokens per case and engine, {args.world_outer} replicates)\n")
        print("Size / nominal (Rao-Blackwellised, ± 3 SE).\n")
        print("| world | test | 1e-3 | 1e-4 | 2e-5 |")
        print("|---|---|---|---|---|")
        for name in MISMATCH_WORLDS:
            say(f"pooled {name}")
            for test, (est, se) in pooled_world_sizes(name, args.world_outer, args.world_rows, args.pooled_cases,
                                                      np.random.default_rng(next(seeds))).items():
                print(f"| {name} | {test} | " + " | ".join(_fmt(est, se)) + " |", flush=True)
    say("done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
