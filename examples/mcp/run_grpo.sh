#!/usr/bin/env bash
# Main job: GRPO on MCP tool tasks (CPU with the default small model when no GPU is present).
#
# Status: the trainer (issue 3) and the MCP environments (issue 4) have not landed yet. Until they do,
# this script installs the project and checks that the environment layer works, then says so plainly.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bash "$repo_root/scripts/setup.sh"

"$repo_root/.venv/bin/python" - <<'PY'
import skyrl_gym

print("Registered environments:")
skyrl_gym.pprint_registry()
PY

cat >&2 <<'MSG'

run_grpo.sh: NOT TRAINING YET. The GRPO trainer and the MCP tool environments are still being built
(skyrl-train core, then MCP integration). This script will generate the MCP task dataset, train the
default CPU model with GRPO, evaluate before and after, and write a report once they land.
MSG
