"""The kernel check on an accelerator: speceq's reference kernels and the mutant gallery on CUDA.

Runs ``speceq.kernels.kernel_check`` with ``device=cuda`` (all request tensors and the kernels' work on
the GPU; the statistics on the CPU) for the reference kernels in every layout, every gallery
mutant and lossless variant, and transformers' ``_speculative_sampling``; records verdicts,
times (kernel vs harness) and the GPU's peak memory; writes kernel-check.json and
kernel-check.md under --out. ``--device cpu`` is the dry run of the same script (the test
suite runs it so, tests/benchmarks/test_gpu_kernel_check.py).

    python benchmarks/gpu/kernel_check.py --out gpu-report                    # on the GPU
    python benchmarks/gpu/kernel_check.py --device cpu --scale 0.05 --out /tmp/k   # dry run
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--out", default="gpu-report")
    parser.add_argument("--only", nargs="*", default=None, help="run only these kernels (names as in the report)")
    parser.add_argument("--max-vocab", type=int, default=None, help="cap the scenarios' vocabulary (a quick dry run)")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))  # tools/ of this checkout
    from tools.checkout_import import import_speceq_from_checkout

    import_speceq_from_checkout()
    import torch

    from speceq.kernels import check
    from speceq.kernels.kernel_mutants import LOSSLESS, MUTANTS
    from speceq.kernels.reference_kernels import reference_kernel
    from speceq.kernels.trees import reference_tree_kernel

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    kernels = {f"reference-{layout}": (lambda layout=layout: reference_kernel(layout), False)
               for layout in ("ragged", "padded", "single")}
    kernels["reference-tree"] = (lambda: reference_tree_kernel("target-only"), False)
    kernels.update({name: (m.make, True) for name, m in MUTANTS.items()})
    kernels.update({name: (m.make, False) for name, m in LOSSLESS.items()})
    try:
        from speceq.kernels.hf_adapter import transformers_speculative_sampling

        kernels["transformers-speculative-sampling"] = (transformers_speculative_sampling, False)
    except ImportError:
        pass
    rows = []
    for name, (make, should_shift) in kernels.items():
        if args.only and name not in args.only:
            continue
        if device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        try:
            kern = make()
            if args.max_vocab is not None:
                import dataclasses

                kern = dataclasses.replace(kern, spec=dataclasses.replace(kern.spec, max_vocab=args.max_vocab))
            r = check(kern, scale=args.scale, device=device)
            verdict, reason = r.verdict, r.reason
            kernel_s = sum(s.kernel_seconds for s in r.scenarios)
            harness_s = sum(s.harness_seconds for s in r.scenarios)
        except Exception as exc:  # noqa: BLE001 - report every kernel, keep going
            verdict, reason, kernel_s, harness_s = "error", f"{type(exc).__name__}: {exc}", 0.0, 0.0
        seconds = time.perf_counter() - t0
        peak = torch.cuda.max_memory_allocated() / 2**20 if device.startswith("cuda") else None
        expected = "shifted" if should_shift else "equivalent"
        rows.append({"kernel": name, "verdict": verdict, "expected": expected, "as_expected": verdict == expected,
                     "seconds": round(seconds, 2), "kernel_seconds": round(kernel_s, 2),
                     "harness_seconds": round(harness_s, 2), "gpu_peak_mb": peak, "reason": reason})
        print(f"{name:36s} {verdict:11s} (expected {expected}) {seconds:6.1f} s", flush=True)
    info = {"device": device, "gpu": torch.cuda.get_device_name(0) if device.startswith("cuda") else None,
            "torch": torch.__version__, "scale": args.scale, "date": time.strftime("%Y-%m-%d"), "rows": rows}
    (out / "kernel-check.json").write_text(json.dumps(info, indent=1))
    lines = [f"# Kernel check on {info['gpu'] or device} ({time.strftime('%Y-%m-%d')}, scale {args.scale})", "",
             "| kernel | verdict | expected | seconds | kernel s | harness s | GPU peak MB |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        peak = "-" if r["gpu_peak_mb"] is None else f"{r['gpu_peak_mb']:.0f}"
        lines.append(f"| {r['kernel']} | {r['verdict']} | {r['expected']} | {r['seconds']} | {r['kernel_seconds']} | "
                     f"{r['harness_seconds']} | {peak} |")
    (out / "kernel-check.md").write_text("\n".join(lines) + "\n")
    bad = [r["kernel"] for r in rows if not r["as_expected"]]
    print(f"{len(rows) - len(bad)} of {len(rows)} kernels as expected" + (f"; not: {bad}" if bad else ""))
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
