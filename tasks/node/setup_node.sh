#!/usr/bin/env bash
# Node setup for the SkyPilot tasks (their `setup:`): Python 3.11, optionally vLLM, then the project's .venv through
# scripts/setup.sh with the torch build vLLM was installed with. Idempotent: a second run only re-checks.
#
#   VLLM_SPEC          vLLM requirement, pinned: "vllm==<version>", e.g. "vllm==0.33.0"; empty = no vLLM (the hf engine
#                      only). When set, vLLM is installed first and SKYRL_TORCH_SPEC is pinned to the torch it brought.
#   SKYRL_TORCH_SPEC   torch requirement when VLLM_SPEC is empty (default in setup.sh: torch==2.13.0, which PyPI
#                      serves as the CUDA build on Linux unless a CPU index is configured).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="$repo_root/.venv"
UV_VERSION=0.13.8

if [[ -n "${VLLM_SPEC:-}" && ! "$VLLM_SPEC" =~ ^vllm==[0-9][0-9A-Za-z.+]*$ ]]; then
    echo "setup_node: VLLM_SPEC=$VLLM_SPEC is not a pinned requirement (vllm==<version>)" >&2
    exit 2
fi

if [[ -z "${SKYRL_PYTHON:-}" ]]; then
    if command -v python3.11 >/dev/null 2>&1; then
        SKYRL_PYTHON="$(command -v python3.11)"
    else
        # Cloud images often ship an older Python: uv (pinned) installs a standalone 3.11.
        python3 -m pip install --quiet --user "uv==$UV_VERSION"
        "$HOME/.local/bin/uv" python install 3.11
        SKYRL_PYTHON="$("$HOME/.local/bin/uv" python find 3.11)"
    fi
fi
export SKYRL_PYTHON
[[ -x "$venv/bin/python" ]] || "$SKYRL_PYTHON" -m venv "$venv"

if [[ -n "${VLLM_SPEC:-}" ]]; then
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$VLLM_SPEC"
    SKYRL_TORCH_SPEC="torch==$("$venv/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])')"
    # vLLM pins its own transformers and more: requirements/lock.txt (made for the CPU venv) would replace them.
    SKYRL_LOCK=""
    export SKYRL_TORCH_SPEC SKYRL_LOCK
fi
bash "$repo_root/scripts/setup.sh"
"$venv/bin/python" -c 'import torch; print(f"setup_node: torch {torch.__version__}, CUDA devices: {torch.cuda.device_count()}")'
