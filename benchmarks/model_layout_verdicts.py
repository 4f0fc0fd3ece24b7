"""Verdicts of the model-level kernel check over repeated seeds: lossless kernels and lossy variants.

Each run is a full default check (``speceq.kernels.check``: scenario ``rows-v8-k3``, 2000
requests x 3 prompts, alpha 1e-3) at its own seed (the scenario's laws, the prompts and every
draw change with the seed). A lossless kernel is called shifted with probability at most alpha
per run (exact-valid cell tests, Holm); what this measures is that the kernels really produce
the laws the check assumes, and how often the lossy variants are found.

    python benchmarks/model_layout_verdicts.py                    # seeds 100.. (40 lossless, 20 lossy runs)
    python benchmarks/model_layout_verdicts.py --lossless 10 --lossy 5 --scale 0.5
"""

from __future__ import annotations

import argparse
import time

import torch

from speceq.kernels.block_resampling import block_resampling_kernel
from speceq.kernels.kernel_check import check
from speceq.kernels.model_layout import reference_model_kernel, residual_from_target_kernel

KERNELS = (
    ("reference:model", reference_model_kernel, True),
    ("model:block-resampling", lambda: block_resampling_kernel("exact"), True),
    ("model:block-resampling-truncated", lambda: block_resampling_kernel("truncated"), False),
    ("model:block-resampling-capped", lambda: block_resampling_kernel("capped"), False),
    ("model:residual-from-target", residual_from_target_kernel, False),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lossless", type=int, default=40, help="runs per lossless kernel")
    ap.add_argument("--lossy", type=int, default=20, help="runs per lossy variant")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=100, help="first seed")
    args = ap.parse_args()
    torch.set_num_threads(1)
    for name, make, lossless in KERNELS:
        runs = args.lossless if lossless else args.lossy
        start = time.perf_counter()
        results = [check(make(), scale=args.scale, seed=args.seed + i) for i in range(runs)]
        shifted = sum(str(r.verdict) == "shifted" for r in results)
        cells = sorted(len(r.rejected) for r in results)
        print(f"{name}: shifted {shifted}/{runs}; rejected cells per run {cells}; "
              f"{(time.perf_counter() - start) / max(runs, 1):.2f} s per check", flush=True)


if __name__ == "__main__":
    main()
