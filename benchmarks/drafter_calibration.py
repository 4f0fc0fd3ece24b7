"""False alarms and power of the draft-conformance check (``speceq kernel --drafter``), over R seeds.

Each run is the default check (``check_drafter(fn, seed=s)``: every template of
``DRAFT_TEMPLATES``, 2000 draws each, Holm at alpha = 1e-3) with its own seed s, so the runs are
independent. Reported per drafter: the run-level rejection rate at the Holm levels 0.05, 0.01
and 1e-3 (the check's) with its Clopper-Pearson 95 % interval (the false-alarm rate for the
conforming drafter, the power for the planted drafter bugs), which templates rejected how
often, and the per-test size P(p <= u) pooled over the conforming drafter's tests.

    python benchmarks/drafter_calibration.py --drafter conforming --runs 2000
    python benchmarks/drafter_calibration.py --drafter bf16-sampling --runs 300
    python benchmarks/drafter_calibration.py --bf16-laws   # how far bfloat16 rounding moves each template's law

``--bf16-laws``: for every template of the default check (seed 0), the TV between the processed
law of its float32 logits and of the same logits rounded to bfloat16, and for comparison zipf
rows at realistic magnitudes (+30, +36) without near-ties: their TV and the goodness of fit's
rejection rate at 1e-3 / (templates) on 200 simulated samples of 2000 bfloat16 draws.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
from scipy import stats


def clopper_pearson(k: int, n: int) -> tuple[float, float]:
    lo = 0.0 if k == 0 else float(stats.beta.ppf(0.025, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(0.975, k + 1, n - k))
    return lo, hi


def bf16_laws(sims: int = 200, draws: int = 2000) -> int:
    import torch

    from speceq.kernels.drafts import DRAFT_TEMPLATES, rows_of_templates
    from speceq.kernels.families import target_logits
    from speceq.kernels.gof import chain_gof
    from speceq.kernels.target_processing import RequestParams, processed_law

    def rounded(row: np.ndarray) -> np.ndarray:
        return torch.from_numpy(row).to(torch.bfloat16).to(torch.float32).numpy()

    level = 1e-3 / len(DRAFT_TEMPLATES)
    rng = np.random.default_rng(0)
    print(f"TV(law of float32 logits, law of bfloat16-rounded logits); power: {sims} samples of {draws} draws "
          f"at {level:.2g}")
    for name, row, params in rows_of_templates(61, np.random.default_rng([0, 11])):
        p, pb = processed_law(row, params), processed_law(rounded(row), params)
        print(f"  {name:28s} max logit {row.max():6.2f}  TV {0.5 * np.abs(p - pb).sum():.4f}")
    for offset in (30.0, 36.0):
        for temperature in (1.0, 0.7):
            row = (target_logits("zipf", 61, rng) + np.float32(offset)).astype(np.float32)
            params = RequestParams(temperature)
            p, pb = processed_law(row, params), processed_law(rounded(row), params)
            hits = sum(chain_gof(np.bincount(rng.choice(61, draws, p=pb / pb.sum()), minlength=61), p,
                                 tv_alpha=level).pvalue <= level for _ in range(sims))
            print(f"  zipf + {offset:g}, T={temperature:g}: TV {0.5 * np.abs(p - pb).sum():.4f}, "
                  f"rejected {hits} of {sims}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--drafter", default="conforming", help="a name of speceq.kernels.drafts.DRAFTERS")
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0, help="first seed (runs use seed .. seed + runs - 1)")
    parser.add_argument("--replicates", type=int, default=2000)
    parser.add_argument("--json", default=None)
    parser.add_argument("--bf16-laws", action="store_true", help="print how bfloat16 moves the templates' laws")
    args = parser.parse_args()
    if args.bf16_laws:
        return bf16_laws()
    import torch

    torch.set_num_threads(1)
    from speceq.kernels.drafts import DRAFTERS, check_drafter

    fn, conforming, why = DRAFTERS[args.drafter]
    start = time.perf_counter()
    smallest, pvalues, rejected_at = [], [], Counter()
    failures = 0
    for s in range(args.seed, args.seed + args.runs):
        r = check_drafter(fn, seed=s, replicates=args.replicates, name=args.drafter)
        smallest.append(min((t.holm for t in r.tests), default=1.0) if not r.failures else 0.0)
        failures += bool(r.failures)
        pvalues += [t.pvalue for t in r.tests]
        # top-p templates are named by their cut (halfway between two masses of the drawn row): pool them
        rejected_at.update(re.sub(r"top_p=[0-9.]+", "top_p~0.9", t.template) for t in r.tests if t.rejected)
    seconds = time.perf_counter() - start
    smallest_a = np.array(smallest)
    out = {"drafter": args.drafter, "conforming": conforming, "bug": why, "runs": args.runs, "seed": args.seed,
           "replicates": args.replicates, "tests_per_run": len(pvalues) // max(args.runs, 1),
           "seconds": round(seconds, 1), "runs_with_hard_failures": failures, "rate": {},
           "templates_rejected_at_1e-3": dict(rejected_at)}
    print(f"drafter {args.drafter} ({why}): {args.runs} runs, seeds {args.seed}..{args.seed + args.runs - 1}, "
          f"{seconds:.0f} s")
    for alpha in (0.05, 0.01, 1e-3):
        k = int((smallest_a <= alpha).sum())
        lo, hi = clopper_pearson(k, args.runs)
        out["rate"][str(alpha)] = {"rejections": k, "rate": k / args.runs, "ci95": [lo, hi]}
        print(f"  rejecting runs at Holm {alpha:g}: {k} ({k / args.runs:.4f}, 95 % CI [{lo:.4f}, {hi:.4f}])")
    print(f"  runs with hard failures: {failures}; templates rejected at 1e-3: {dict(rejected_at)}")
    if conforming:
        p = np.array(pvalues)
        m = out["tests_per_run"]
        size = {str(u): float((p <= u).mean()) for u in (1e-2, 1e-3, 1e-4, 1e-3 / m)}
        out["per_test_size"] = size
        print(f"  per-test size P(p <= u) over {p.size} tests: " + ", ".join(f"u={u}: {v:.2g}" for u, v in size.items()))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
