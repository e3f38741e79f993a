#!/usr/bin/env bash
# Create .venv/sky: the SkyPilot client (tasks/requirements-sky.txt) in a venv of its own, apart from the training
# venv whose click/uvicorn versions skypilot's pins would downgrade. Idempotent: returns at once when up to date.
#
#   bash tasks/launch/setup_sky.sh && .venv/sky/bin/sky launch tasks/gsm8k.yaml
#
#   SKYRL_PYTHON   interpreter used to create the venv (default: python3.11, else python3).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=../../scripts/lib/venv.sh
source "$repo_root/scripts/lib/venv.sh"
venv="$repo_root/.venv/sky"
requirements="$repo_root/tasks/requirements-sky.txt"
stamp_file="$venv/.skyrl-sky-stamp"
wanted="$(cat "${BASH_SOURCE[0]}" "$requirements" | sha256sum | cut -d' ' -f1)"
if venv_up_to_date "$venv" "$stamp_file" "$wanted"; then
    exit 0
fi

python_bin="$(base_python)"
echo "setup_sky: installing the SkyPilot client into $venv (about a minute)" >&2
[[ -x "$venv/bin/python" ]] || "$python_bin" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
echo "$wanted" >"$stamp_file"
