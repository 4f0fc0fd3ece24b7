#!/usr/bin/env bash
# Start vLLM's OpenAI-compatible server on 127.0.0.1 in the background and wait until it answers.
#
# Usage: scripts/vllm/serve.sh MODEL_DIR PORT [SPEC_JSON]
#   SPEC_JSON: a --speculative-config value, e.g.
#     '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":3,"prompt_lookup_min":1}'
#     '{"method":"draft_model","model":"harness/models/draft","num_speculative_tokens":3}'
# Environment: SPECEQ_VLLM_VENV (default .venv-vllm), SPECEQ_VLLM_RUN_DIR (pid and log files,
#   default .venv-vllm/run), SPECEQ_VLLM_WAIT_S (default 600), VLLM_CPU_KVCACHE_SPACE (GiB, default 1),
#   SPECEQ_VLLM_PATCH_EXPAND=1: start vLLM with the workaround for vllm-project/vllm#55005
#   (scripts/vllm/patched/sitecustomize.py; for experiments, see docs/how-to/test-a-server.md),
#   SPECEQ_VLLM_ARGS: more server arguments (word-split), e.g. the server oracle's
#   "--max-logprobs -1 --skip-tokenizer-init" (docs/explanation/server-oracle.md).
# Prints the server's process-group id on stdout; stop it with `kill -- -PGID` (ci.sh does).
# Exits non-zero, after stopping the server, when it does not answer /v1/models in time.
set -euo pipefail

if [[ $# -lt 2 || $# -gt 3 ]]; then
    echo "usage: $0 MODEL_DIR PORT [SPEC_JSON]" >&2
    exit 2
fi
model_dir="$(cd "$1" && pwd)"
port="$2"
spec_json="${3:-}"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv_dir="${SPECEQ_VLLM_VENV:-$repo_root/.venv-vllm}"
run_dir="${SPECEQ_VLLM_RUN_DIR:-$venv_dir/run}"
wait_s="${SPECEQ_VLLM_WAIT_S:-600}"
mkdir -p "$run_dir"
log="$run_dir/server-$port.log"
pidfile="$run_dir/server-$port.pid"

if [[ ! -x "$venv_dir/bin/python" ]]; then
    echo "no vllm venv at $venv_dir: run scripts/vllm/setup.sh first" >&2
    exit 1
fi

args=(-m vllm.entrypoints.openai.api_server --model "$model_dir" --tokenizer "$model_dir"
      --host 127.0.0.1 --port "$port" --dtype float32 --max-model-len 256 --enforce-eager --seed 0
      --no-enable-chunked-prefill --max-num-batched-tokens 4096)
if [[ -n "$spec_json" ]]; then
    args+=(--speculative-config "$spec_json")
fi
if [[ -n "${SPECEQ_VLLM_ARGS:-}" ]]; then
    read -r -a extra_args <<< "$SPECEQ_VLLM_ARGS"
    args+=("${extra_args[@]}")
fi

# --no-enable-chunked-prefill: vllm-cpu 0.32.0 kills its engine ("CPU Generator does not use
# offset") when a *seeded* request's prefill is split across steps, which happens as soon as a few
# long prompts with n > 1 exceed the token budget of one step. Whole prefills avoid it.

# Intel OpenMP makes CPU speculative decoding faster (vLLM warns without it); use it when present.
preload="${LD_PRELOAD:-}"
if [[ -f "$venv_dir/lib/libiomp5.so" ]]; then
    preload="$venv_dir/lib/libiomp5.so${preload:+:$preload}"
fi

pythonpath="${PYTHONPATH:-}"
if [[ "${SPECEQ_VLLM_PATCH_EXPAND:-0}" == "1" ]]; then
    pythonpath="$repo_root/scripts/vllm/patched${pythonpath:+:$pythonpath}"
fi

# setsid: the server and its engine-core child form one process group, stopped together.
VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}" LD_PRELOAD="$preload" PYTHONPATH="$pythonpath" \
    setsid "$venv_dir/bin/python" "${args[@]}" >"$log" 2>&1 < /dev/null &
pgid=$!
echo "$pgid" > "$pidfile"
echo "vllm server (pgid $pgid) starting on 127.0.0.1:$port, log $log" >&2

deadline=$((SECONDS + wait_s))
until curl -fsS --max-time 5 "http://127.0.0.1:$port/v1/models" > /dev/null 2>&1; do
    if ! kill -0 "$pgid" 2>/dev/null; then
        echo "vllm server on port $port exited during start-up; last log lines:" >&2
        tail -n 30 "$log" >&2
        exit 1
    fi
    if (( SECONDS >= deadline )); then
        echo "vllm server on port $port did not answer within ${wait_s} s; stopping it. Last log lines:" >&2
        tail -n 30 "$log" >&2
        kill -- "-$pgid" 2>/dev/null || true
        exit 1
    fi
    sleep 2
done
echo "vllm server on port $port is up after $((SECONDS)) s" >&2
echo "$pgid"
