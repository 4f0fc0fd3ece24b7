"""Exact size of the kernel check's chain-binomial test at the Holm levels (~1e-5), per template test.

The check's p-value for one planned test (:func:`speceq.kernels.gof.chain_gof`) is
p = min(1, 2 min(p_F, (K - 1) min_j p_j)) over the chain of K - 1 conditional binomials of the
binned counts. Its size P(p <= u) under the tested law, for a fixed number of observations n,
is computed here without blind replicates:

- the part from the minimum, P(M) with M = {2 (K - 1) min_j p_j <= u}, exactly, by dynamic
  programming over the chain (state: the observations left, the mass not yet hit; chain
  probabilities below 1e-30 dropped, their total is reported as ``dropped``);
- the rest, P(F and not M) with F = {2 p_F <= u}, by sequential importance sampling: each
  conditional binomial count O_j is drawn from its law tilted by p_j^-theta (an exponential
  tilt of Fisher's statistic -2 sum log p_j, theta set so its mean is near the threshold), with
  the exact likelihood-ratio weight prod_j Z_j p_j^theta; reported with its standard error.

Every p_j and p_F is computed by the check's own functions (``binomial_two_sided``, the chi2
tail), and a sample of the drawn tables is passed through ``chain_gof`` itself to confirm the
p-values agree. The templates are the default check's (seed 0). ``--cases flagged`` (the
default) takes the tests the V <= 61 calibration flagged, at the observed n of the flagged test,
and every ``vocab-2`` test; ``--cases all`` takes every planned test of the check of
``--variant`` on ``--scenarios``, at n = its expected n rounded (``--cases unflagged``: those not
in the flagged set; ``--cheapest-first``: in order of cost). The size is conditional on n
(the number of requests reaching the position is random for every test but the length and
position 0), and P(p <= u | n) <= u for every n gives the unconditional bound.

    python benchmarks/kernel_gof_size.py --samples 40000 --json gof-size.json
    python benchmarks/kernel_gof_size.py --cases all --scenarios large --json gof-size-large.json
    python benchmarks/kernel_gof_size.py --cases unflagged --cheapest-first --json gof-size-rest.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

LEVELS = (1e-5, 1.2e-5, 1.5e-5, 1.7e-5, 2e-5)
#: (scenario, template, component, position, n) of the tests with p <= 2e-5 in the 2026-12-01
#: calibration runs (reference, exponential-race, block seeds 0 and 1), plus vocab-2, plus the two
#: tests behind the one false alarm each of the 2026-12-02 block and exponential-race runs.
CASES = (
    ("mixed-v61", "sparse/disjoint/k3/T=1", "token", 0, 2000),
    ("mixed-v61", "flat/flat/k1/T=1", "token", 0, 2000),
    ("mixed-v61", "flat/flat/k1/T=1", "accepted", 0, 1796),
    ("mixed-v61", "near-tie/equal/k3/T=1", "token", 1, 2000),
    ("mixed-v61", "near-tie/equal/k3/T=1", "token", 2, 2000),
    ("mixed-v61", "floor/overlap/k3/T=1", "bonus", 3, 1133),
    ("mixed-v61", "floor/overlap/k3/T=1", "token", 2, 1352),
    ("mixed-v61", "zipf/overlap/k2/T=1, top_k=5", "bonus", 2, 1115),
    ("mixed-v61", "zipf/one-hot/k2/T=1", "token", 1, 213),
    ("mixed-v61", "zipf/overlap/k1/T=1.5", "length", None, 2000),
    ("mixed-v61", "zipf/overlap/k1/T=1.5", "recovered", 0, 437),
    ("vocab-2", "*", "*", None, None),
    ("mixed-v61", "zipf/overlap/k3/T=0.7", "bonus", 3, 916),
    ("mixed-v61", "zipf/overlap/k3/T=0.7", "accepted", 2, 698),
)


def chain_bins(law: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The bin probabilities the check uses for ``law`` at ``n`` observations, and each label's bin."""
    from speceq.kernels.gof import MIN_EXPECTED
    from speceq.stats import probability_bins

    p = law / law.sum()
    bins = probability_bins(p, n, MIN_EXPECTED)
    used = bins >= 0
    bp = np.bincount(bins[used], weights=p[used], minlength=int(bins.max()) + 1)
    return bp / bp.sum(), bins


def _conditional(bp: np.ndarray) -> np.ndarray:
    before = np.concatenate([[0.0], np.cumsum(bp)[:-1]])
    return np.clip(bp[:-1] / np.clip(1.0 - before[:-1], 1e-300, None), 0.0, 1.0)  # as binomial_two_sided


def exact_min_part(bp: np.ndarray, n: int, cuts: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """P(min_j p_j <= cut) exactly for each cut (dynamic programming over the chain), and the mass dropped."""
    from speceq.kernels.gof import binomial_two_sided

    pis = _conditional(bp)
    c = np.asarray(cuts, dtype=np.float64)
    mass = np.zeros((c.size, n + 1))
    mass[:, n] = 1.0
    hit = np.zeros(c.size)
    dropped = np.zeros(c.size)
    for pi in pis:
        new = np.zeros_like(mass)
        for r in np.flatnonzero(mass.max(axis=0) > 0):
            w = mass[:, r]
            small = w < 1e-30
            dropped += np.where(small, w, 0.0)
            o = np.arange(r + 1)
            pmf = stats.binom.pmf(o, r, pi)
            pv = binomial_two_sided(o, np.full(o.size, r), np.full(o.size, pi))
            for i in np.flatnonzero(~small):
                bad = pv <= c[i]
                hit[i] += w[i] * float(pmf[bad].sum())
                new[i, r - o[~bad]] += w[i] * pmf[~bad]
        mass = new
    return hit, dropped


def tilted_fisher_part(bp: np.ndarray, n: int, levels: tuple[float, ...], samples: int,
                       rng: np.random.Generator) -> dict:
    """P(2 p_F <= u and 2 (K-1) min p_j > u) for each u, by sequential importance sampling (see module)."""
    from speceq.kernels.gof import binomial_two_sided

    pis = _conditional(bp)
    steps = pis.size
    dof = 2 * steps
    target = float(stats.chi2.isf(float(np.median(levels)) / 2, dof))
    theta = float(np.clip(1.0 - dof / target, 0.0, 0.95))
    cache: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, float]] = {}
    r = np.full(samples, n, dtype=np.int64)
    logw = np.zeros(samples)
    pj = np.ones((samples, steps))
    counts = np.zeros((samples, steps + 1), dtype=np.int64)
    for j, pi in enumerate(pis):
        o_all = np.zeros(samples, dtype=np.int64)
        for rv in np.unique(r):
            key = (j, int(rv))
            if key not in cache:
                o = np.arange(rv + 1)
                pmf = stats.binom.pmf(o, rv, pi)
                pv = binomial_two_sided(o, np.full(o.size, rv), np.full(o.size, pi))
                tilt = pmf * np.clip(pv, 1e-300, 1.0) ** (-theta)
                z = float(tilt.sum())
                cache[key] = (np.cumsum(tilt) / z, pv, z)
            cdf, pv, z = cache[key]
            sel = np.flatnonzero(r == rv)
            o = np.minimum(np.searchsorted(cdf, rng.random(sel.size), side="right"), rv)
            o_all[sel] = o
            pj[sel, j] = pv[o]
            logw[sel] += math.log(z) + theta * np.log(np.clip(pv[o], 1e-300, 1.0))
        counts[:, j] = o_all
        r = r - o_all
    counts[:, steps] = r
    stat = -2.0 * np.log(np.clip(pj, 1e-300, 1.0)).sum(axis=1)
    fisher = stats.chi2.sf(stat, dof)
    pmin = pj.min(axis=1)
    pvalue = np.minimum(1.0, 2.0 * np.minimum(fisher, steps * pmin))
    w = np.exp(logw)
    out = {"theta": theta, "samples": samples, "by_level": {}}
    for u in levels:
        ind = (2.0 * fisher <= u) & (2.0 * steps * pmin > u)
        x = w * ind
        out["by_level"][f"{u:.3g}"] = {"estimate": float(x.mean()), "se": float(x.std(ddof=1) / math.sqrt(samples)),
                                       "hits": int(ind.sum())}
    out["_counts"], out["_pvalue"] = counts, pvalue
    return out


def check_against_chain_gof(law: np.ndarray, bins: np.ndarray, counts: np.ndarray, pvalue: np.ndarray,
                            rng: np.random.Generator, take: int = 200) -> float:
    """Largest relative difference between these p-values and ``chain_gof`` on label counts with these bin counts."""
    from speceq.kernels.gof import chain_gof

    first = np.array([int(np.flatnonzero(bins == b)[0]) for b in range(counts.shape[1])])

    order = np.argsort(pvalue)[:take // 2]
    pick = np.concatenate([order, rng.choice(pvalue.size, take - order.size, replace=False)])
    worst = 0.0
    for i in pick:
        labels = np.zeros(law.size, dtype=np.int64)
        labels[first] = counts[i]
        got = chain_gof(labels, law / law.sum()).pvalue
        worst = max(worst, abs(got - pvalue[i]) / max(pvalue[i], 1e-300))
    return worst


def size_of(law: np.ndarray, n: int, samples: int, rng: np.random.Generator,
            levels: tuple[float, ...] = LEVELS) -> dict:
    """P(p <= u | n) of the check's test of ``law`` for each u in ``levels`` (module docstring)."""
    bp, bins = chain_bins(law, n)
    steps = bp.size - 1
    out = {"n": n, "bins": int(bp.size), "levels": {}}
    if steps < 1:
        out["note"] = "fewer than 2 bins: p = 1"
        return out
    fisher = tilted_fisher_part(bp, n, levels, samples, rng) if steps > 1 else None
    if fisher is not None:
        out["theta"] = fisher["theta"]
        out["chain_gof_max_rel_diff"] = check_against_chain_gof(law, bins, fisher["_counts"], fisher["_pvalue"], rng)
    exact_all, dropped_all = exact_min_part(bp, n, tuple(u / (2.0 * steps) for u in levels))
    for u, exact, dropped in zip(levels, exact_all, dropped_all):
        exact, dropped = float(exact), float(dropped)
        rest = fisher["by_level"][f"{u:.3g}"] if fisher else {"estimate": 0.0, "se": 0.0, "hits": 0}
        total = exact + rest["estimate"]
        out["levels"][f"{u:.3g}"] = {"size": total, "ratio": total / u, "min_part_exact": exact,
                                     "fisher_only_part": rest["estimate"], "fisher_only_se": rest["se"],
                                     "fisher_only_hits": rest["hits"], "dropped": dropped}
    return out


def select_tests(scenarios: list, spec: object, cases: str = "flagged") -> list[tuple]:
    """(scenario name, template, planned test, n) of every test to size: ``flagged`` (CASES), ``all``, or
    ``unflagged`` (all but those CASES takes, which keep their observed n there)."""
    from speceq.kernels.law_tests import plan

    if cases == "unflagged":
        done = {(s, t.name, x.component, x.position) for s, t, x, _ in select_tests(scenarios, spec, "flagged")}
        return [c for c in select_tests(scenarios, spec, "all")
                if (c[0], c[1].name, c[2].component, c[2].position) not in done]
    out = []
    by_name = {s.name: s for s in scenarios}
    chosen = [(s.name, "*", "*", None, None) for s in scenarios] if cases == "all" else CASES
    for scen, tname, comp, pos, n in chosen:
        sc = by_name[scen]
        for tpl in sc.templates:
            if tname not in ("*", tpl.name):
                continue
            for test in plan(tpl, spec, sc.copies(tpl)):
                if comp not in ("*", test.component) or (comp != "*" and test.position != pos):
                    continue
                out.append((scen, tpl, test, n if n is not None else int(round(test.expected_n))))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=40000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    parser.add_argument("--only", default=None, help="run the cases whose template name contains this")
    parser.add_argument("--cases", choices=("flagged", "all", "unflagged"), default="flagged")
    parser.add_argument("--scenarios", choices=("small", "large", "all"), default="small",
                        help="with --cases all: the V <= 61 scenarios, the others, or every default scenario")
    parser.add_argument("--cheapest-first", action="store_true",
                        help="order the tests by their cost (bins x n^2), so that a run cut short keeps the most")
    parser.add_argument("--variant", default="reference",
                        help="whose planned tests (reference: the ragged reference kernel; or a lossless variant)")
    args = parser.parse_args()
    from speceq.kernels.kernel_mutants import LOSSLESS
    from speceq.kernels.reference_kernels import reference_kernel
    from speceq.kernels.scenarios import default_scenarios

    rng = np.random.default_rng(args.seed)
    kern = reference_kernel("ragged") if args.variant == "reference" else LOSSLESS[args.variant].make()
    spec = kern.spec
    scenarios = default_scenarios(spec, seed=0)
    if args.cases != "all" or args.scenarios == "small":
        scenarios = [s for s in scenarios if s.vocab_size <= 61]
    elif args.scenarios == "large":
        scenarios = [s for s in scenarios if s.vocab_size > 61]
    rows = []
    start = time.perf_counter()
    chosen = select_tests(scenarios, spec, args.cases)
    if args.cheapest_first:
        chosen.sort(key=lambda c: chain_bins(c[2].law, c[3])[0].size * c[3] ** 2)
    for scen, tpl, test, nn in chosen:
        if args.only and args.only not in tpl.name:
            continue
        t0 = time.perf_counter()
        res = size_of(test.law, nn, args.samples, rng)
        res.update(scenario=scen, template=tpl.name, component=test.component, position=test.position,
                   expected_n=test.expected_n, seconds=round(time.perf_counter() - t0, 2))
        rows.append(res)
        if args.json:  # after every test, so that a run stopped early keeps what it has
            partial = {"variant": args.variant, "cases": args.cases, "rows": rows, "samples": args.samples,
                       "complete": False}
            Path(args.json).write_text(json.dumps(partial, indent=1))
        worst = max(v["ratio"] for v in res["levels"].values()) if res["levels"] else 0.0
        print(f"{scen} / {tpl.name}: {test.component} {test.position} n={nn} K={res['bins']}: "
              + ", ".join(f"u={u}: {v['size']:.3g} ({v['ratio']:.2f}x; min part {v['min_part_exact']:.3g}, "
                          f"Fisher-only {v['fisher_only_part']:.2g} +- {v['fisher_only_se']:.1g})"
                          for u, v in res["levels"].items() if u in ("1e-05", "1.7e-05", "2e-05"))
              + f"; largest ratio {worst:.2f}; chain_gof agrees to {res.get('chain_gof_max_rel_diff', 0):.1g}",
              flush=True)
    out = {"variant": args.variant, "cases": args.cases, "scenarios": [s.name for s in scenarios], "rows": rows,
           "samples": args.samples, "complete": True,
           "seconds": round(time.perf_counter() - start, 1), "date": time.strftime("%Y-%m-%d")}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
