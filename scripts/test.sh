#!/usr/bin/env bash
# Run the whole test suite: lint (pre-commit hooks) and every package's tests.
#
#   bash scripts/test.sh            lint + the fast suite (what CI runs)
#   bash scripts/test.sh --slow     also the end-to-end checks marked `slow` (minutes each)
#   bash scripts/test.sh --vllm     only the tests marked `vllm`, in the vLLM venv (scripts/setup_vllm.sh; engine
#                                   starts take a minute each on CPU), no lint
#   bash scripts/test.sh -- ARGS    extra pytest arguments, e.g. `-- -k registry -x`
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

marker=(-m "not slow and not vllm")
extra=()
vllm=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --slow) marker=(-m "not vllm"); shift ;;
        --vllm) vllm=1; shift ;;
        --) shift; extra=("$@"); break ;;
        *) echo "test.sh: unknown argument '$1' (use --slow, --vllm or -- PYTEST_ARGS)" >&2; exit 2 ;;
    esac
done

if [[ $vllm == 1 ]]; then
    bash "$repo_root/scripts/setup_vllm.sh"
    exec "$repo_root/.venv/vllm/bin/pytest" -m vllm skyrl-train/tests/inference_engines/vllm ${extra[@]+"${extra[@]}"}
fi
bash "$repo_root/scripts/setup.sh"
export PATH="$repo_root/.venv/bin:$PATH"

echo "== lint: pre-commit hooks on all files"
pre-commit run --all-files --show-diff-on-failure

echo "== tests"
python -m pytest "${marker[@]}" skyrl-gym/tests skyrl-train/tests integrations/tests tests ${extra[@]+"${extra[@]}"}
