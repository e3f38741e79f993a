#!/usr/bin/env bash
# Run the whole test suite: lint (pre-commit hooks) and every package's tests.
#
#   bash scripts/test.sh            lint + the fast suite (what CI runs)
#   bash scripts/test.sh --slow     also the end-to-end checks marked `slow` (minutes each)
#   bash scripts/test.sh -- ARGS    extra pytest arguments, e.g. `-- -k registry -x`
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$repo_root/scripts/setup.sh"
cd "$repo_root"
export PATH="$repo_root/.venv/bin:$PATH"

marker=(-m "not slow")
extra=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --slow) marker=(-m "slow or not slow"); shift ;;
        --) shift; extra=("$@"); break ;;
        *) echo "test.sh: unknown argument '$1' (use --slow or -- PYTEST_ARGS)" >&2; exit 2 ;;
    esac
done

echo "== lint: pre-commit hooks on all files"
pre-commit run --all-files --show-diff-on-failure

echo "== tests"
python -m pytest "${marker[@]}" skyrl-gym/tests skyrl-train/tests integrations/tests tests ${extra[@]+"${extra[@]}"}
