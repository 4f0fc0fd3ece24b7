#!/usr/bin/env bash
# The prepared GPU check (one H200; torch + CUDA, transformers, scipy, pandas, pyarrow present;
# no registry access). Runs benchmarks/gpu/check.py within 8 minutes and leaves gpu-check.md,
# gpu-check.json and check.log under $OUT (default ./gpu-report).
#
# Usage: bash benchmarks/gpu/check.sh [extra check.py options]   (PYTHON=... picks the interpreter)
#        bash benchmarks/gpu/check.sh kernels [kernel_check.py options]
#   The second form runs only the kernel check (benchmarks/gpu/kernel_check.py: speceq's reference
#   kernels, the mutant gallery and transformers' sampler on CUDA) within 400 s, leaving
#   kernel-check.md, kernel-check.json and kernel-check.log under $OUT.
# Needs no install: check.py imports speceq from this checkout when it is not installed.
#   smoke test on a CPU: bash benchmarks/gpu/check.sh --device cpu --tokens 2000 --greedy-prompts 4
#   kernel check dry run on a CPU: bash benchmarks/gpu/check.sh kernels --device cpu --scale 0.05
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="${OUT:-gpu-report}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/nvidia-smi.txt" 2>&1 || true
if [[ "${1:-}" == "kernels" ]]; then
    shift
    timeout 400 "${PYTHON:-python}" benchmarks/gpu/kernel_check.py --out "$out" "$@" 2>&1 | tee "$out/kernel-check.log"
    rc=${PIPESTATUS[0]}
    echo "kernel_check.py exit code $rc (124 = ran out of its 400 s)" | tee -a "$out/kernel-check.log"
    exit "$rc"
fi
timeout 470 "${PYTHON:-python}" benchmarks/gpu/check.py --out "$out" "$@" 2>&1 | tee "$out/check.log"
rc=${PIPESTATUS[0]}
echo "check.py exit code $rc (124 = ran out of its 470 s)" | tee -a "$out/check.log"
exit "$rc"
