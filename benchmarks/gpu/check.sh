#!/usr/bin/env bash
# The prepared GPU check (one H200; torch + CUDA, transformers, scipy, pandas, pyarrow present;
# no registry access). Runs benchmarks/gpu/check.py within 8 minutes and leaves gpu-check.md,
# gpu-check.json and check.log under $OUT (default ./gpu-report).
#
# Usage: bash benchmarks/gpu/check.sh [extra check.py options]   (PYTHON=... picks the interpreter)
# Needs no install: check.py imports speceq from this checkout when it is not installed.
#   smoke test on a CPU: bash benchmarks/gpu/check.sh --device cpu --tokens 2000 --greedy-prompts 4
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="${OUT:-gpu-report}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/nvidia-smi.txt" 2>&1 || true
timeout 470 "${PYTHON:-python}" benchmarks/gpu/check.py --out "$out" "$@" 2>&1 | tee "$out/check.log"
rc=${PIPESTATUS[0]}
echo "check.py exit code $rc (124 = ran out of its 470 s)" | tee -a "$out/check.log"
exit "$rc"
