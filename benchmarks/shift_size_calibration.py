"""Calibration of the shift size (speceq.stats.tv_interval) and of the within-tolerance outcome.

1. Coverage: two engines sample laws at a known TV (mass moved from the most likely token to the
   least likely one of a Zipf law); at each (vocabulary, TV, n, alpha) ``--reps`` draws measure how
   often [low, high] of :func:`speceq.stats.tv_size` covers the true TV, and the mean held-out
   estimate, plug-in TV, low and high.
2. The within-tolerance decision at the Holm level: a case of ``--positions`` positions (the per-position
   chi-square tests, Holm at ``--alpha``, :func:`speceq.stats.max_tv_size`, decided by
   :func:`speceq.verdicts.decide.decide_run` with the numerics tolerance ``--numerics-tolerance``), in
   two worlds: the laws agree (any outcome other than equivalent / inconclusive is a false alarm,
   as before), and the candidate is shifted at one position by exactly the tolerance (a
   ``within-tolerance`` verdict there is the new outcome's false alarm: a difference as large as the
   tolerance called smaller than it). A third world, shifted at one position by a quarter of the
   tolerance at ``--power-n`` draws per engine, shows how often the outcome is reached where it is right.

Usage (about 4 minutes on the 2-core CPU machine):

    python benchmarks/shift_size_calibration.py --json /tmp/size.json
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np
from scipy import stats as sps

from speceq.stats import chisquare_homogeneity, max_tv_size, tv_size
from speceq.verdicts.decide import CaseEvidence, decide_run
from speceq.verdicts.kinds import TestKind
from speceq.verdicts.result import TestOutcome


def zipf(k: int, s: float = 1.1) -> np.ndarray:
    p = 1.0 / np.arange(1, k + 1) ** s
    return p / p.sum()


def shifted(p: np.ndarray, tv: float) -> np.ndarray:
    q = p.copy()
    q[0] -= tv
    q[-1] += tv
    return q


def coverage(k: int, tv: float, n: int, alpha: float, reps: int, rng: np.random.Generator) -> dict[str, Any]:
    p = zipf(k)
    q = shifted(p, tv)
    rows = [tv_size(rng.multinomial(n, p), rng.multinomial(n, q), alpha=alpha, rng=rng) for _ in range(reps)]
    covered = sum(r.low <= tv <= r.high for r in rows)
    lo, hi = sps.beta.ppf([0.025, 0.975], [covered, covered + 1], [reps - covered + 1, reps - covered])
    return {"k": k, "tv": tv, "n": n, "alpha": alpha, "reps": reps, "coverage": covered / reps,
            "coverage_ci95": [float(0.0 if covered == 0 else lo), float(1.0 if covered == reps else hi)],
            "mean_estimate": float(np.mean([r.estimate for r in rows])),
            "mean_plug_in": float(np.mean([r.plug_in for r in rows])),
            "mean_low": float(np.mean([r.low for r in rows])), "mean_high": float(np.mean([r.high for r in rows]))}


def decide_once(p: np.ndarray, qs: list[np.ndarray], n: int, alpha: float, tol: float,
                rng: np.random.Generator) -> str:
    ca = [rng.multinomial(n, p) for _ in qs]
    cb = [rng.multinomial(n, q) for q in qs]
    tests = []
    for t, (a, b) in enumerate(zip(ca, cb)):
        res = chisquare_homogeneity(a, b, rng=rng, mc_level=alpha / len(qs))
        tests.append(TestOutcome(name=f"chi2 position {t}", family="two-sample", primary=True,
                                 statistic=float(res.statistic), pvalue=float(res.pvalue), kind=TestKind.CHI2_POSITION))
    size = max_tv_size(ca, cb, alpha=alpha, rng=rng)
    ev = CaseEvidence(case_id="c", tests=tuple(tests), tv_estimate=size.plug_in, tv_upper_bound=size.high,
                      effective_support=10.0, n_baseline=n, n_candidate=n, size=size)
    (d,) = decide_run([ev], alpha=alpha, tolerance=0.15, numerics_tolerance=tol)
    return d.verdict


def decisions(world: str, k: int, n: int, positions: int, alpha: float, tol: float, reps: int,
              rng: np.random.Generator) -> dict[str, Any]:
    p = zipf(k)
    shift = {"agree": 0.0, "at tolerance": tol, "quarter tolerance": tol / 4}[world]
    qs = [shifted(p, shift)] + [p] * (positions - 1)
    counts: dict[str, int] = {}
    for _ in range(reps):
        v = decide_once(p, qs, n, alpha, tol, rng)
        counts[v] = counts.get(v, 0) + 1
    bad = {"agree": counts.get("within-tolerance", 0) + counts.get("shifted", 0),
           "at tolerance": counts.get("within-tolerance", 0), "quarter tolerance": 0}[world]
    upper = float(sps.beta.ppf(0.95, bad + 1, reps - bad))
    return {"world": world, "k": k, "n": n, "positions": positions, "alpha": alpha, "numerics_tolerance": tol,
            "reps": reps, "verdicts": counts, "false_alarms": bad, "false_alarm_rate": bad / reps,
            "rate_upper_95": upper}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=400, help="draws per coverage cell. Default: %(default)s")
    ap.add_argument("--decision-reps", type=int, default=3000, help="draws per decision world. Default: %(default)s")
    ap.add_argument("--alpha", type=float, default=1e-3, help="the run's family-wise level. Default: %(default)g")
    ap.add_argument("--numerics-tolerance", type=float, default=0.02, help="Default: %(default)g")
    ap.add_argument("--positions", type=int, default=4, help="positions of the decided case. Default: %(default)s")
    ap.add_argument("--decision-n", type=int, default=60000, help="draws per engine in the decision worlds. "
                    "Default: %(default)s (where the upper bound can fall below 0.02)")
    ap.add_argument("--power-n", type=int, default=1000000, help="draws per engine in the quarter-tolerance "
                    "world. Default: %(default)s")
    ap.add_argument("--power-reps", type=int, default=100, help="draws of that world. Default: %(default)s")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    out: dict[str, Any] = {"settings": vars(args), "coverage": [], "decisions": []}
    for k in (259, 2000):
        for tv in (0.0, 0.01, 0.05):
            for n in (3000, 15000):
                for alpha in (0.05, args.alpha):
                    c = coverage(k, tv, n, alpha, args.reps, rng)
                    out["coverage"].append(c)
                    print(f"k={k} TV={tv} n={n} alpha={alpha:g}: coverage {c['coverage']:.3f} "
                          f"[{c['coverage_ci95'][0]:.3f}, {c['coverage_ci95'][1]:.3f}] estimate {c['mean_estimate']:.4f} "
                          f"plug-in {c['mean_plug_in']:.4f} low {c['mean_low']:.4f} high {c['mean_high']:.4f}",
                          flush=True)
    for world in ("agree", "at tolerance", "quarter tolerance"):
        power = world == "quarter tolerance"
        d = decisions(world, 259, args.power_n if power else args.decision_n, args.positions, args.alpha,
                      args.numerics_tolerance, args.power_reps if power else args.decision_reps, rng)
        out["decisions"].append(d)
        print(f"{world} (n={d['n']}): {d['verdicts']}; false alarms {d['false_alarms']} of {d['reps']} "
              f"(rate {d['false_alarm_rate']:.2g}, 95 % upper {d['rate_upper_95']:.2g})", flush=True)
    out["seconds"] = round(time.perf_counter() - started, 1)
    print(f"total {out['seconds']} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
