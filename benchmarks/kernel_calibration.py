"""False alarms of the kernel check on lossless kernels, at the Holm level, over R repeated checks.

Every p-value of the check is exact-valid by construction (the chain-binomial goodness of fit,
tests/kernels/test_gof.py checks its size exactly by enumeration, benchmarks/kernel_gof_size.py
computes it at 1e-5 to 2e-5 for the check's templates), and Holm bounds the
family-wise rate under any dependence; what this measures is that the lossless kernels really
produce the laws the check assumes (float32 processing against the float64 laws, unambiguous
cuts, independent requests). R checks are run in blocks: one collection of B x the default
replicates, split into B independent checks (the requests are independent draws, so the split
is exactly B checks' worth of data), each analysed as the check does (its planned tests, Holm).

Reported: the run-level false-alarm rate (smallest Holm-adjusted p <= alpha) at alpha = 0.05,
0.01, 1e-3, with its Clopper-Pearson 95 % interval; the per-test size P(p <= u) pooled over
every test of every run at u = 1e-2, 1e-3, 1e-4 and at the check's first Holm threshold alpha / m
(1e-3 / m); every test with p < 1e-4 (which run, where, n, TV); and any broken invariant (none is
allowed for a correct kernel).

Seeds: the scenarios (the templates and their laws) come from ``--seed`` as in the default
check; the requests, drafts and uniforms of block b come from :func:`collection_seed`, which
mixes the variant's name (CRC-32 of its UTF-8 bytes), ``--seed`` and b in a numpy SeedSequence.
So two variants never share their requests or drafts (their false-alarm counts are independent
samples), while one variant at one ``--seed`` is reproducible.

    python benchmarks/kernel_calibration.py --variant exponential-race --runs 1000
    python benchmarks/kernel_calibration.py --variant reference --runs 1000 --chain-detail
    python benchmarks/kernel_calibration.py --variant single-reference --runs 200 --block 10   (one call per request)
    python benchmarks/kernel_calibration.py --variant reference --runs 150 --block 10 --scenarios all
    python benchmarks/kernel_calibration.py --variant tree-target-only --runs 1000   (also tree-multi-draft:
    the tree check's collection and node tests, its small scenarios tree-v61 and tree-v2)
    (--chain-detail: also the pooled randomized p-values of every chain binomial, exactly
    uniform under the laws, see :func:`chain_randomized`)
    (--scenarios small: the V <= 61 scenarios, which hold most tests; large: the others (V = 40 000
    and 256 000, ~8 s per check); all: every default scenario. The JSON splits the time of the
    collection into the kernel's calls and the harness around them, per scenario, and the tests',
    and gives the per-test size per scenario too.)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np
from scipy import stats

#: The lossless tree kernels (the tree check's own collection and tests).
TREE_VARIANTS = ("tree-target-only", "tree-multi-draft")


def make_kernel(name: str):  # noqa: ANN201
    from speceq.kernels.kernel_mutants import LOSSLESS
    from speceq.kernels.reference_kernels import reference_kernel

    if name in TREE_VARIANTS:
        from speceq.kernels.trees import reference_tree_kernel

        return reference_tree_kernel(name.removeprefix("tree-"))
    if name == "reference":
        return reference_kernel("ragged")
    if name == "transformers":
        from speceq.kernels.hf_adapter import transformers_speculative_sampling

        return transformers_speculative_sampling()
    return LOSSLESS[name].make()


def collection_seed(variant: str, seed: int, block_index: int) -> int:
    """The collection seed of one block of checks: distinct per variant, ``--seed`` and block (63 bits)."""
    tag = zlib.crc32(variant.encode("utf-8"))
    state = np.random.SeedSequence([tag, seed, block_index]).generate_state(1, dtype=np.uint64)[0]
    return int(state >> np.uint64(1))


def chain_randomized(labels: np.ndarray, law: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Randomized p-values of the chain's conditional binomials of one test (exactly iid U(0, 1) under the law).

    The check's chain-binomial test bins ``labels`` as :func:`~speceq.kernels.gof.chain_gof` does and
    takes p_j = P(|X - m pi| >= |o - m pi|) for each bin given the earlier ones; here the atom at
    the observed deviation is split by an independent uniform V: p_j - (1 - V) P(|X - m pi| = |o - m pi|).
    Each is U(0, 1) given the earlier bins, so they are iid uniforms whatever the discreteness, and
    their pooled count below u has mean exactly u per bin: a direct check, at levels far below what
    the tests' own discrete sizes resolve, that the kernel's outputs follow the law in the tails.
    """
    from speceq.kernels.gof import MIN_EXPECTED, binomial_two_sided
    from speceq.stats import probability_bins

    p = law / law.sum()
    n = int(labels.size)
    bins = probability_bins(p, n, MIN_EXPECTED)
    used = bins >= 0
    k = int(bins.max()) + 1 if used.any() else 0
    if k < 2:
        return np.zeros(0)
    counts = np.bincount(labels, minlength=p.size)[: p.size]
    obs = np.bincount(bins[used], weights=counts[used], minlength=k)
    bp = np.bincount(bins[used], weights=p[used], minlength=k)
    bp = bp / bp.sum()
    before_o = np.concatenate([[0.0], np.cumsum(obs)[:-1]])[:-1]
    before_p = np.concatenate([[0.0], np.cumsum(bp)[:-1]])[:-1]
    m = n - before_o
    pi = np.clip(bp[:-1] / np.clip(1.0 - before_p, 1e-300, None), 0.0, 1.0)
    x = obs[:-1]
    pv = binomial_two_sided(x, m, pi)
    mirror = np.round(2.0 * m * pi - x)
    equal = (np.abs((mirror - m * pi) + (x - m * pi)) <= 1e-9) & (mirror != x) & (mirror >= 0) & (mirror <= m)
    atom = stats.binom.pmf(x, m, pi) + np.where(equal, stats.binom.pmf(mirror, m, pi), 0.0)
    return np.clip(pv - (1.0 - rng.random(x.size)) * atom, 0.0, 1.0)


def _tree_slice(record, scenario, run: int):  # noqa: ANN001, ANN202
    """The ``run``-th check's share of a tree collection of B x the replicates (consecutive requests per template)."""
    from speceq.kernels.trees import TreeRecord, TreeScenarioRecord

    recs = {}
    for name, rec in record.records.items():
        if len(rec.paths) > 1:  # concatenated once per block
            rec.paths, rec.tokens = [np.concatenate(rec.paths)], [np.concatenate(rec.tokens)]
        c = scenario.copies(rec.template)
        sl = slice(run * c, (run + 1) * c)
        recs[name] = TreeRecord(rec.template, [rec.paths[0][sl]], [rec.tokens[0][sl]])
    return TreeScenarioRecord(scenario, recs, {}, record.summary)


def _cp(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    a = (1 - level) / 2
    low = 0.0 if k == 0 else float(stats.beta.ppf(a, k, n - k + 1))
    high = 1.0 if k == n else float(stats.beta.ppf(1 - a, k + 1, n - k))
    return low, high


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", default="reference")
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--block", type=int, default=50)
    parser.add_argument("--scenarios", choices=("small", "large", "all"), default="small")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    parser.add_argument("--max-seconds", type=float, default=None,
                        help="start no new block after this many seconds (R is then the runs done; the time "
                             "does not depend on the outcomes, so the stop does not bias the counts)")
    parser.add_argument("--chain-detail", action="store_true",
                        help="also pool the randomized p-values of every chain binomial (see chain_randomized)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    from speceq.kernels.kernel_calls import ScenarioRecord, TemplateRecord, collect
    from speceq.kernels.kernel_check import DEFAULT_ALPHA, planned_tests
    from speceq.kernels.law_tests import observations, plan, run_tests
    from speceq.kernels.scenarios import default_scenarios
    from speceq.stats import holm

    kern = make_kernel(args.variant)
    tree = kern.spec.layout == "tree"
    if tree and args.chain_detail:
        parser.error("--chain-detail is for the chain layouts")
    if tree:
        from speceq.kernels.trees import collect_tree, default_tree_scenarios, planned_tree_tests, tree_tests

        base = default_tree_scenarios(kern.spec, seed=args.seed)
    else:
        base = default_scenarios(kern.spec, seed=args.seed)
    if args.scenarios == "small":
        base = [s for s in base if s.vocab_size <= 61]
    elif args.scenarios == "large":
        base = [s for s in base if s.vocab_size > 61]
    planned = planned_tree_tests(base, kern.spec.method) if tree else None
    m = len(planned) if tree else planned_tests(base, kern.spec)
    tv_alpha = DEFAULT_ALPHA / max(m, 1)
    min_holm: list[float] = []
    pooled: list[np.ndarray] = []
    violations = 0
    smallest: list[dict] = []
    where: list[str] = []
    chain_p: dict[str, list[np.ndarray]] = {}
    detail_rng = np.random.default_rng([args.seed, 7])
    kernel_s: dict[str, float] = {}
    harness_s: dict[str, float] = {}
    tests_s = 0.0
    sizes_n: list[np.ndarray] = []
    written = 0
    start = time.perf_counter()
    done = 0
    block_index = 0
    while done < args.runs and (args.max_seconds is None or time.perf_counter() - start < args.max_seconds):
        b = min(args.block, args.runs - done)
        big = [replace(s, replicates=s.replicates * b, boundary_replicates=s.boundary_replicates * b) for s in base]
        seed = collection_seed(args.variant, args.seed, block_index)
        if tree:
            trees = collect_tree(kern, big, seed=seed)
            violations += sum(count for r in trees for count, _ in r.found.values())
            times = [(r.scenario.name, r.summary.kernel_seconds, r.summary.harness_seconds) for r in trees]
            written += sum(r.inputs_written for r in trees)
        else:
            records = collect(kern, big, seed=seed)
            violations += sum(v.count for r in records for v in r.violations)
            times = [(r.scenario.name, r.kernel_seconds, r.harness_seconds) for r in records]
            written += sum(r.inputs_written for r in records)
        for name, ks, hs in times:
            kernel_s[name] = kernel_s.get(name, 0.0) + ks
            harness_s[name] = harness_s.get(name, 0.0) + hs
        t_tests = time.perf_counter()
        for run in range(b):
            chunk = []
            if tree:
                tests = tree_tests([_tree_slice(r, sc, run) for r, sc in zip(trees, base)], planned, tv_alpha=tv_alpha)
            else:
                for sr, sc in zip(records, base):
                    recs = []
                    for rec in sr.records:
                        d, t, L = rec.arrays()
                        c = sc.copies(rec.template)
                        sl = slice(run * c, (run + 1) * c)
                        recs.append(TemplateRecord(rec.template, [d[sl]], [t[sl]], [L[sl]]))
                    chunk.append(ScenarioRecord(sc, recs, (), 0, 0, 0.0, 0.0))
                tests = run_tests(chunk, kern.spec, tv_alpha=tv_alpha)
            p = np.array([t.pvalue for t in tests])
            smallest.extend({"run": done + run, "pvalue": t.pvalue, "where": t.where, "n": t.n, "tv": t.tv,
                             "support_violations": t.support_violations} for t in tests if t.pvalue < 1e-4)
            pooled.append(p)
            if args.chain_detail:
                for sr in chunk:
                    for rec in sr.records:
                        d, tk, L = rec.arrays()
                        for pt in plan(rec.template, kern.spec, sr.scenario.copies(rec.template)):
                            lab = observations(pt, d, tk, L)
                            if lab.size:
                                chain_p.setdefault(pt.component, []).append(chain_randomized(lab, pt.law, detail_rng))
            if not where:
                where = [t.where for t in tests]
            if len(tests) == len(where):
                sizes_n.append(np.array([t.n for t in tests], dtype=np.float64))
            min_holm.append(float(holm(p).min()) if p.size else 1.0)
        tests_s += time.perf_counter() - t_tests
        done += b
        block_index += 1
        print(f"{done}/{args.runs} runs, {time.perf_counter() - start:.0f} s", flush=True)
    mh = np.array(min_holm)
    allp = np.concatenate(pooled)
    fwer = {}
    for a in (0.05, 0.01, 1e-3):
        k = int((mh <= a).sum())
        fwer[str(a)] = {"alarms": k, "runs": int(mh.size), "rate": k / mh.size, "ci95": _cp(k, int(mh.size))}
    first = DEFAULT_ALPHA / m
    size = {}
    for u in (1e-2, 1e-3, 1e-4, first):
        k = int((allp <= u).sum())
        size[f"{u:.3g}"] = {"count": k, "tests": int(allp.size), "rate": k / allp.size,
                            "ratio_to_nominal": (k / allp.size) / u, "ci95": _cp(k, int(allp.size))}
    per_test = []
    if sizes_n and all(p.size == len(where) for p in pooled):
        grid = np.stack(pooled)
        mean_n = np.stack(sizes_n).mean(axis=0)
        for j, w in enumerate(where):
            col = grid[:, j]
            per_test.append({"where": w, "mean_n": round(float(mean_n[j]), 1),
                             "p<=1e-3": int((col <= 1e-3).sum()), "p<=1e-4": int((col <= 1e-4).sum()),
                             "p<=first": int((col <= first).sum())})
    by_scenario = {}
    if per_test:
        grid = np.stack(pooled)
        for name in dict.fromkeys(w.split(" / ")[0] for w in where):
            cols = [j for j, w in enumerate(where) if w.split(" / ")[0] == name]
            sub = grid[:, cols].ravel()
            by_scenario[name] = {"tests_per_run": len(cols), "tests": int(sub.size), **{
                f"{u:.3g}": {"count": int((sub <= u).sum()), "rate": float((sub <= u).mean()),
                             "ratio_to_nominal": float((sub <= u).mean() / u)} for u in (1e-2, 1e-3, 1e-4, first)}}
    chain = {}
    if chain_p:
        groups = {"all": list(chain_p), "token+bonus+length": [c for c in chain_p if c in ("token", "bonus", "length")]}
        for gname, comps in groups.items():
            arr = np.concatenate([x for c in comps for x in chain_p[c]])
            chain[gname] = {"bins": int(arr.size), **{f"{u:.0e}": {
                "count": int((arr <= u).sum()), "expected": arr.size * u,
                "ratio": float((arr <= u).sum() / (arr.size * u)),
                "poisson_p_at_least": float(stats.poisson.sf(int((arr <= u).sum()) - 1, arr.size * u))}
                for u in (1e-2, 1e-3, 1e-4, 1e-5, 1e-6)}}
    out = {"variant": args.variant, "kernel": kern.name, "seed": args.seed, "runs_asked": args.runs,
           "seed_rule": "collection_seed(variant, seed, block): SeedSequence([crc32(variant), seed, block])", "scenarios": [s.name for s in base], "planned_tests": m,
           "runs": int(mh.size), "fwer": fwer, "per_test_size": size, "violations": violations,
           "scenarios_with_inputs_written": written,
           "p_below_1e-4": sorted(smallest, key=lambda x: x["pvalue"]),
           "chain_randomized": chain, "per_test": per_test, "per_test_size_by_scenario": by_scenario,
           "time_s": {"kernel_by_scenario": {k: round(v, 1) for k, v in kernel_s.items()},
                      "harness_by_scenario": {k: round(v, 1) for k, v in harness_s.items()},
                      "tests_holm": round(tests_s, 1)},
           "seconds": round(time.perf_counter() - start, 1), "date": time.strftime("%Y-%m-%d")}
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
