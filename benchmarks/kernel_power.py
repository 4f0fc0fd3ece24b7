"""The kernel mutant gallery and the power table: speceq's kernel check against the engines' own tests.

For every gallery kernel (13 mutants, the lossless variants, the tree kernels, the drafters):

- speceq at the default budget (scale 1): verdict, time, requests, first findings;
- speceq's draws to detect: the smallest scale of 0.025, 0.05, 0.1, 0.25, 0.5, 1 at which the
  default check says shifted (seed 0), as the number of requests the check made;
- the engines' own tests re-implemented (speceq.kernels.engine_tests), each at its own budget
  over --seeds seeds: vLLM's L2 convergence ratio (111 110 requests), FlashInfer's cosine > 0.99
  (--cosine-draws draws; its limit, the cosine of the kernel's law, is reported), TensorRT-LLM's
  KL within 0.01 (50 000 draws; limit KL(p || kernel's law)). "never" = the engine test's setting
  cannot exercise the bug (the detection rate is 0 and the limit statistic passes).

    python benchmarks/kernel_power.py --seeds 3 --json /tmp/kernel-power.json   # 16 min on 2 cores (2026-12-01)
    python benchmarks/kernel_power.py --quick                            # a smoke run
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

GRID = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--cosine-draws", type=int, default=200_000)
    parser.add_argument("--quick", action="store_true", help="scale 0.1, 1 seed, 40 000 cosine draws, few kernels")
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    from speceq.kernels import check
    from speceq.kernels.drafts import DRAFT_TEMPLATES, DRAFTERS, check_drafter
    from speceq.kernels.engine_tests import flashinfer_cosine, trtllm_kl, vllm_l2_ratio
    from speceq.kernels.kernel_mutants import LOSSLESS, MUTANTS
    from speceq.kernels.trees import InclusiveCoin, SiblingsNotRemoved, reference_tree_kernel

    default_scale = 0.1 if args.quick else 1.0
    seeds = 1 if args.quick else args.seeds
    cos_draws = 40_000 if args.quick else args.cosine_draws
    grid = tuple(g for g in GRID if g <= default_scale)
    chain = [(name, m.make, not m.lossless, m.bug, m.source) for name, m in (*MUTANTS.items(), *LOSSLESS.items())]
    trees = [("tree-siblings-kept", lambda: reference_tree_kernel("target-only", impl=SiblingsNotRemoved(),
                                                                   name="tree-siblings-kept"), True,
              "target-only tree: final token from p with the rejected children's tokens", "SGLang target-only kernel"),
             ("tree-inclusive-coin", lambda: reference_tree_kernel("target-only", impl=InclusiveCoin(),
                                                                    name="tree-inclusive-coin"), True,
              "target-only tree: coin <= cumulative mass accepts a child of probability 0", "sglang#35771"),
             ("tree-target-only", lambda: reference_tree_kernel("target-only"), False, "lossless", "SGLang / EAGLE"),
             ("tree-multi-draft", lambda: reference_tree_kernel("multi-draft"), False, "lossless", "SpecInfer")]
    rows = []
    for name, make, bug, what, source in [*chain, *trees]:
        if args.only and name not in args.only:
            continue
        t0 = time.perf_counter()
        r = check(make(), scale=default_scale)
        row = {"kernel": name, "bug": what, "source": source, "mutant": bug, "verdict": r.verdict,
               "seconds": round(time.perf_counter() - t0, 1), "requests": sum(s.requests for s in r.scenarios),
               "findings": [f.text for f in r.findings[:3]]}
        if bug:
            row["draws_to_detect"] = None
            for g in grid:
                rg = check(make(), scale=g, solo=False)
                if rg.verdict == "shifted":
                    row["draws_to_detect"] = sum(s.requests for s in rg.scenarios)
                    row["detect_scale"] = g
                    break
        if not name.startswith("tree"):
            engines = {}
            for label, fn in (("vllm_l2", vllm_l2_ratio), ("trtllm_kl", trtllm_kl), ("flashinfer_cosine", flashinfer_cosine)):
                results = []
                for s in range(seeds):
                    kw = {"draws": cos_draws} if label == "flashinfer_cosine" else {}
                    results.append(fn(make(), seed=s, **kw))
                engines[label] = {"detect_rate": sum(x.detected for x in results) / len(results),
                                  "statistic": results[0].statistic, "threshold": results[0].threshold,
                                  "limit": results[0].limit, "draws": results[0].draws}
            row["engine_tests"] = engines
        rows.append(row)
        print(f"{name:30s} {r.verdict:11s} {row['seconds']:6.1f}s draws-to-detect {row.get('draws_to_detect')} "
              + " ".join(f"{k}={v['detect_rate']:.1f}" for k, v in row.get("engine_tests", {}).items()), flush=True)
    for name, (fn, ok, why) in DRAFTERS.items():
        if args.only and name not in args.only:
            continue
        t0 = time.perf_counter()
        r = check_drafter(fn, name=name, replicates=200 if args.quick else 2000)
        rows.append({"kernel": f"drafter:{name}", "bug": why, "mutant": not ok, "verdict": r.verdict,
                     "seconds": round(time.perf_counter() - t0, 1),
                     "requests": len(DRAFT_TEMPLATES) * (200 if args.quick else 2000),
                     "findings": [r.reason]})
        print(f"drafter:{name:22s} {r.verdict}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "scale": default_scale,
                                               "seeds": seeds, "cosine_draws": cos_draws, "rows": rows}, indent=1))
    print("\n| kernel | speceq (scale 1) | speceq draws to detect | vLLM L2 ratio | TRT-LLM KL | FlashInfer cosine |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        e = row.get("engine_tests")

        def cell(key: str, e: dict | None = e) -> str:
            if not e:
                return "n/a"
            d = e[key]
            lim = "" if d["limit"] is None else f", limit {d['limit']:.3g}"
            return f"{d['detect_rate']:.0%} ({d['statistic']:.3g}{lim})"

        print(f"| {row['kernel']} | {row['verdict']} | {row.get('draws_to_detect', '-')} | {cell('vllm_l2')} | "
              f"{cell('trtllm_kl')} | {cell('flashinfer_cosine')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
