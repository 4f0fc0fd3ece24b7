"""The sequential mode, measured: A/A false alarms, the price of certifying, the mutant gallery.

Three parts (each prints a markdown table and adds its numbers to ``--json``):

``aa``
    False-``shifted`` rate of the whole sequential family of a case (the 8 tests of an oracle
    case with one prompt: paired position 0, joint first 2 and length; the argmax,
    log-likelihood, PIT, draft ratio and support comparisons of both engines' oracle scores)
    on synthetic A/A data drawn with numpy from known laws, each path looked at after EVERY
    sample, at alpha = 0.05, 0.01, 0.001 (e-value Bonferroni, as the driver). Also every test
    alone at level alpha. Tokens come from a bank of random next-token laws (speceq.stats.synthetic).
``certify``
    Samples per engine at which a correct engine is certified (TV bound < tolerance),
    sequential (first look of the schedule whose time-uniform bound is below the tolerance)
    vs fixed-n (smallest n at which a fixed-size run certifies with probability 0.5 / 0.9),
    on synthetic laws of 8 positions (two-sample bound, alpha / 8 per position).
``gallery``
    Samples to a ``shifted`` verdict for every mutant of the gallery with the bundled models
    and the real driver (speceq.run with sequential=True, oracle on, alpha = 0.01 as in
    docs/measurements/power.md), a few seeds each, against the fixed-n detection sizes of docs/measurements/power.json.

Usage: python benchmarks/sequential.py [aa|certify|gallery|all] [--reps R] [--json PATH]
       python benchmarks/sequential.py gallery --seeds 3 --budget 1500 [--mutants a,b] [--support-margin-nats NATS]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from speceq.stats import sequential as seq
from speceq.stats.synthetic import random_target_probs

REPO = Path(__file__).resolve().parents[1]
ALPHAS = (0.05, 0.01, 0.001)


# ---- A/A ---------------------------------------------------------------------------------------

class _Bank:
    """B random next-token laws over V tokens with everything the oracle tests need per law."""

    def __init__(self, rng: np.random.Generator, laws: int = 256, vocab: int = 64) -> None:
        p = random_target_probs(rng, laws, vocab, top_k=0)
        top = random_target_probs(rng, laws // 4, vocab, top_k=8)
        self.p = np.concatenate([p, top])
        q = random_target_probs(rng, self.p.shape[0], vocab)
        self.cdf = np.cumsum(self.p, axis=1)
        order = np.argsort(-self.p, axis=1, kind="stable")
        ranked = np.take_along_axis(self.p, order, axis=1)
        before_ranked = np.cumsum(ranked, axis=1) - ranked
        self.cdf_before = np.empty_like(self.p)
        np.put_along_axis(self.cdf_before, order, before_ranked, axis=1)
        self.argmax = np.argmax(self.p, axis=1)
        self.m = self.p.max(axis=1)
        with np.errstate(divide="ignore"):
            logp = np.where(self.p > 0, np.log(np.where(self.p > 0, self.p, 1.0)), 0.0)
        self.logp = np.where(self.p > 0, logp, -np.inf)
        self.mean = (self.p * logp).sum(axis=1)
        self.var = np.maximum((self.p * logp**2).sum(axis=1) - self.mean**2, 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(self.p > 0, np.minimum(q / np.where(self.p > 0, self.p, 1.0), 10.0), 10.0)
        self.ratio = ratio - (self.p * ratio).sum(axis=1, keepdims=True)  # the draft-ratio score, centred under p

    def draw(self, rng: np.random.Generator, idx: np.ndarray) -> np.ndarray:
        u = rng.random(idx.shape)
        x = (self.cdf[idx] <= u[..., None]).sum(axis=-1)
        return np.minimum(x, self.p.shape[1] - 1)


TEST_NAMES = ("pair position 0", "pair joint first 2", "pair length", "argmax comparison", "log-likelihood comparison",
              "PIT comparison", "draft ratio comparison", "support comparison")


def _aa_block(rng: np.random.Generator, bank: _Bank, reps: int, samples: int, length: int) -> np.ndarray:
    """Max log e over the whole path, per replicate and test: [reps, tests]."""
    first = rng.dirichlet(np.full(12, 0.7))
    second = rng.dirichlet(np.full(12, 0.7))
    lens = rng.dirichlet(np.full(length, 1.0))
    a0, b0 = (rng.choice(12, size=(reps, samples), p=first) for _ in range(2))
    a1, b1 = (rng.choice(12, size=(reps, samples), p=second) for _ in range(2))
    la, lb = (rng.choice(length, size=(reps, samples), p=lens) for _ in range(2))
    out = [seq.paired_exchangeability_log_e(a0, b0), seq.paired_exchangeability_log_e(a0 * 100 + a1, b0 * 100 + b1),
           seq.paired_exchangeability_log_e(la, lb)]
    # oracle tokens of both engines: `length` per sample, each from a bank law chosen independently of the data;
    # row scores per sample, compared pair by pair (the driver's comparison e-processes)
    rows = []
    for _ in range(2):
        idx = rng.integers(0, bank.p.shape[0], size=(reps, samples * length))
        idx[:, ::length] = 0  # position 0 always has the same law (the case's prompt)
        x = bank.draw(rng, idx)
        p = bank.p[idx, x]
        per = {
            "argmax": (x == bank.argmax[idx]) - bank.m[idx],
            "loglik": np.maximum(np.where(p > 0, bank.logp[idx, x], -np.inf) - bank.mean[idx], -10.0),
            "pit": bank.cdf_before[idx, x] + p / 2 - 0.5,
            "ratio": bank.ratio[idx, x],
            "support": (p <= 0).astype(float),
        }
        rows.append({k: v.reshape(reps, samples, length).sum(axis=2) for k, v in per.items()})
    for k in ("argmax", "loglik", "pit", "ratio"):
        out.append(seq.paired_sign_log_e(rows[1][k] - rows[0][k]))
    out.append(seq.paired_sign_log_e(np.minimum(rows[1]["support"], 1) - np.minimum(rows[0]["support"], 1)))
    return np.stack([np.maximum(o.max(axis=1), 0.0) for o in out], axis=1)


def run_aa(reps: int, samples: int = 200, length: int = 8, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    bank = _Bank(rng)
    t0 = time.perf_counter()
    blocks = []
    done = 0
    while done < reps:
        r = min(100, reps - done)
        blocks.append(_aa_block(rng, bank, r, samples, length))
        done += r
    top = np.concatenate(blocks)  # [reps, tests]
    k = top.shape[1]
    family = {a: float((top >= math.log(k / a)).any(axis=1).mean()) for a in ALPHAS}
    single = {name: {a: float((top[:, i] >= math.log(1 / a)).mean()) for a in ALPHAS}
              for i, name in enumerate(TEST_NAMES)}
    res = {"reps": reps, "samples": samples, "tokens_per_sample": length, "family": family, "single": single,
           "seconds": time.perf_counter() - t0}
    print(f"\n### A/A: false-`shifted` rate, every sample looked at (R = {reps}, {samples} samples x {length} tokens)\n")
    print("| level alpha | family of 8 (alpha/8 each) | 95 % upper (Clopper-Pearson) |")
    print("|---|---|---|")
    from scipy.stats import beta as beta_dist

    for a in ALPHAS:
        hits = round(family[a] * reps)
        upper = float(beta_dist.ppf(0.95, hits + 1, reps - hits)) if hits < reps else 1.0
        print(f"| {a:g} | {family[a]:.4f} ({hits}/{reps}) | {upper:.4f} |")
    print("\n| test alone | " + " | ".join(f"alpha = {a:g}" for a in ALPHAS) + " |")
    print("|---|" + "---|" * len(ALPHAS))
    for name in TEST_NAMES:
        print(f"| {name} | " + " | ".join(f"{single[name][a]:.4f}" for a in ALPHAS) + " |")
    return res


# ---- certification -----------------------------------------------------------------------------

def run_certify(reps: int, seed: int = 1, alpha: float = 1e-3, length: int = 8, symbols: int = 12,
                tolerances: tuple[float, ...] = (0.15, 0.1, 0.05)) -> dict[str, Any]:
    from speceq.pipeline.sequential.driver import look_totals
    from speceq.stats import tv_upper_bound_two_sample

    rng = np.random.default_rng(seed)
    laws = rng.dirichlet(np.full(symbols, 0.5), size=length)
    n_max = 60000
    looks = np.array(look_totals(n_max))
    fixed_grid = np.unique(np.round(np.geomspace(100, n_max, 60)).astype(int))
    seq_n = {t: [] for t in tolerances}
    fixed_ok = {t: np.zeros(fixed_grid.size) for t in tolerances}
    t0 = time.perf_counter()
    for _ in range(reps):
        a = np.stack([rng.choice(symbols, size=n_max, p=laws[t]) for t in range(length)])
        b = np.stack([rng.choice(symbols, size=n_max, p=laws[t]) for t in range(length)])

        def tv_at(n: int, a: np.ndarray = a, b: np.ndarray = b) -> np.ndarray:
            return np.array([0.5 * np.abs(np.bincount(a[t, :n], minlength=symbols)
                                          - np.bincount(b[t, :n], minlength=symbols)).sum() / n for t in range(length)])

        for tol in tolerances:  # sequential: the first look whose time-uniform bound is below tol
            hit = None
            for n in looks:
                g = seq.grid_point_at_most(int(n))
                if g is None:
                    continue
                k, gn = g
                if max(seq.sequential_tv_upper_bound(v, int(n), k, gn, alpha, positions=length).upper
                       for v in tv_at(gn)) < tol:
                    hit = int(n)
                    break
            seq_n[tol].append(hit if hit is not None else math.inf)
        for i, n in enumerate(fixed_grid):
            bound = max(tv_upper_bound_two_sample(v, int(n), int(n), alpha / length) for v in tv_at(int(n)))
            for tol in tolerances:
                fixed_ok[tol][i] += bound < tol
    res: dict[str, Any] = {"reps": reps, "alpha": alpha, "positions": length, "symbols": symbols, "rows": []}
    print(f"\n### Certifying a correct engine (synthetic, {length} positions x {symbols} symbols, alpha = {alpha:g}, "
          f"R = {reps})\n")
    print("| tolerance | fixed-n, P(certify) >= 0.5 | fixed-n, >= 0.9 | sequential median | sequential 90 % | "
          "ratio (median / fixed 0.5) |")
    print("|---|---|---|---|---|---|")
    for tol in tolerances:
        rate = fixed_ok[tol] / reps
        f50 = int(fixed_grid[np.argmax(rate >= 0.5)]) if (rate >= 0.5).any() else None
        f90 = int(fixed_grid[np.argmax(rate >= 0.9)]) if (rate >= 0.9).any() else None
        s = np.array(seq_n[tol], dtype=float)
        med, q90 = float(np.median(s)), float(np.quantile(s, 0.9))
        ratio = med / f50 if f50 else math.nan
        res["rows"].append({"tolerance": tol, "fixed50": f50, "fixed90": f90, "seq_median": med, "seq_q90": q90})
        print(f"| {tol:g} | {f50} | {f90} | {med:.0f} | {q90:.0f} | {ratio:.2f} |")
    res["seconds"] = time.perf_counter() - t0
    return res


# ---- the mutant gallery ------------------------------------------------------------------------

def _fixed_sizes() -> dict[str, dict[str, Any]]:
    doc = json.loads((REPO / "docs" / "measurements" / "power.json").read_text())
    out = {}
    for v in doc["variants"]:
        det = next((d for d in v["detections"] if d["method"] == "speceq"), None)
        if det is None:
            continue
        n50 = next((n for n, r in zip(det["sizes"], det["rates"]) if r >= 0.5), None)
        out[v["name"]] = {"n90": det["n90"], "n50": n50, "tv": max(v["tv"]) if v.get("tv") else None,
                          "lossless": v["lossless"]}
    return out


def run_gallery(seeds: int, budget: int, mutants: list[str] | None, alpha: float = 0.01,
                tolerance: float = 0.15, support_margin_nats: float | None = None) -> dict[str, Any]:
    """``support_margin_nats``: the support hard failure's numerics margin; None: ``speceq run``'s on the bundled models."""
    import torch

    torch.set_num_threads(1)
    from speceq.core.defaults import SUPPORT_MARGIN_NATS
    from speceq.engines.mutants import MUTANTS
    from speceq.pipeline.config import RunConfig
    from speceq.pipeline.runner import run
    from speceq.power.settings import settings_for
    from speceq.power.study import PowerStudy
    from speceq.verdicts.reasons import note_line

    margin = SUPPORT_MARGIN_NATS if support_margin_nats is None else support_margin_nats
    fixed = _fixed_sizes()
    cal = PowerStudy(settings_for("quick"), log=lambda *a, **k: None)
    names = mutants or [n for n, s in MUTANTS.items() if not s.lossless]  # lossless ones: --mutants
    rows = []
    print(f"\n### Mutant gallery: samples per engine to `shifted` (alpha = {alpha:g}, {seeds} seeds, budget {budget}, "
          f"support margin {margin:g} nats)\n")
    print("| mutant | TV | fixed-n n50 / n90 (docs/measurements/power.json) | sequential: stopped at (per seed) | first crossing "
          "(per seed) | median stop / fixed n90 | seconds |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            spec = MUTANTS[name]
            case = cal.case(name, spec)
            stops, firsts, verdicts, decided, notes, reasons = [], [], [], [], [], []
            t0 = time.perf_counter()
            for s in range(seeds):
                engines = {"baseline": cal.baseline, "candidate": cal.engine(spec)}
                cfg = RunConfig(samples=budget, alpha=alpha, tolerance=tolerance, seed=s, out_dir=Path(tmp) / f"{name}-{s}", resume=False,
                                progress=False, oracle_draft="bundled", sequential=True,
                                support_margin_nats=margin)
                c = run(cfg, [case], engines=engines).cases[0]
                verdicts.append(c.verdict)
                reasons.append(c.reason)
                decided.append(c.n_baseline)
                stops.append(c.n_baseline if c.verdict == "shifted" else math.inf)
                first = None
                if "first crossed at sample " in c.reason:
                    first = int(c.reason.rsplit("first crossed at sample ", 1)[1].split()[0].rstrip(",;"))
                elif "hard failure" in c.reason:
                    first = c.n_baseline
                firsts.append(first)
                notes.append(note_line(c.notes[-1]) if c.notes else "")
            secs = time.perf_counter() - t0
            f = fixed.get(name, {})
            med = float(np.median(stops))
            ratio = med / f["n90"] if f.get("n90") and math.isfinite(med) else math.nan
            rows.append({"mutant": name, "tv": f.get("tv"), "fixed_n50": f.get("n50"), "fixed_n90": f.get("n90"),
                         "stops": [None if not math.isfinite(x) else int(x) for x in stops], "first_crossings": firsts,
                         "verdicts": verdicts, "reasons": reasons, "decided_at": decided, "fixed_size_notes": notes,
                         "seconds": secs})
            stop_txt = ", ".join(str(int(x)) if math.isfinite(x) else f"{n} ({v})" for x, v, n in zip(stops, verdicts, decided))
            tv = f"{f['tv']:.3f}" if f.get("tv") is not None else "—"
            print(f"| {name} | {tv} | {f.get('n50')} / {f.get('n90')} | {stop_txt} | "
                  f"{', '.join(str(x) for x in firsts)} | {ratio:.2f} | {secs:.0f} |", flush=True)
            if spec.lossless:
                for n, note in zip(decided, notes):
                    print(f"|   at n = {n}: {note.split(';')[0]} | | | | | | |", flush=True)
    return {"alpha": alpha, "seeds": seeds, "budget": budget, "support_margin_nats": margin, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("part", nargs="?", default="all", choices=("aa", "certify", "gallery", "all"))
    ap.add_argument("--reps", type=int, default=10_000, help="A/A replicates (default %(default)s)")
    ap.add_argument("--certify-reps", type=int, default=200, help="certification replicates (default %(default)s)")
    ap.add_argument("--seeds", type=int, default=3, help="gallery seeds per mutant (default %(default)s)")
    ap.add_argument("--budget", type=int, default=1500, help="gallery budget per engine (default %(default)s)")
    ap.add_argument("--mutants", default=None, help="comma-separated mutant names (default: every non-lossless one)")
    ap.add_argument("--alpha", type=float, default=0.01, help="gallery alpha (default %(default)s, as docs/measurements/power.md)")
    ap.add_argument("--tolerance", type=float, default=0.15, help="gallery tolerance (default %(default)s)")
    ap.add_argument("--support-margin-nats", type=float, default=None, metavar="NATS",
                    help="gallery: numerics margin of the support hard failure (default: speceq run's on the bundled "
                         "models, 0.5; inf: off)")
    ap.add_argument("--json", default=None, metavar="PATH", help="write the numbers there")
    args = ap.parse_args(argv)
    out: dict[str, Any] = {}
    if args.part in ("aa", "all"):
        out["aa"] = run_aa(args.reps)
    if args.part in ("certify", "all"):
        out["certify"] = run_certify(args.certify_reps)
    if args.part in ("gallery", "all"):
        out["gallery"] = run_gallery(args.seeds, args.budget, args.mutants.split(",") if args.mutants else None,
                                     alpha=args.alpha, tolerance=args.tolerance,
                                     support_margin_nats=args.support_margin_nats)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
