#!/usr/bin/env bash
# Main job: GRPO on MCP tool-use questions against the bundled offline market-data MCP server, about 30 minutes on a
# 2-core CPU from a fresh clone. The recipe, with the reason for each value, is examples/mcp/grpo.yaml; this script
# makes the data, trains, and writes the report: $OUT/exports/report/summary.md (eval per template before vs after,
# the curve) and $OUT/exports/report/evals.html (per template and step, failure categories).
#
#   bash examples/mcp/run_grpo.sh                        # CPU defaults
#   bash examples/mcp/run_grpo.sh trainer.epochs=2 ...   # extra arguments: config overrides or --config presets
#   ENGINE=vllm bash examples/mcp/run_grpo.sh            # rollouts from vLLM's CPU build (examples/cpu_vllm.yaml)
#
# Environment knobs: OUT (output folder), TRAIN_SIZE / VAL_SIZE (training / held-out questions generated), TEMPLATES
# (question templates; `python -m skyrl_integrations.datasets.rule_based --help`), SERVERS, COMPLEXITIES. The data is
# made once into $OUT/data: change OUT (or delete that folder) after changing them. Bigger settings: examples/README.md.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bash "$repo_root/scripts/setup.sh"
python="$repo_root/.venv/bin/python"
if [[ "${ENGINE:-hf}" == vllm ]]; then
    bash "$repo_root/scripts/setup_vllm.sh"
    python="$repo_root/.venv/vllm/bin/python"
    set -- --config "$repo_root/examples/cpu_vllm.yaml" "$@"
fi

OUT="${OUT:-$repo_root/outputs/mcp}"
DATA="$OUT/data"
TRAIN_SIZE="${TRAIN_SIZE:-72}"
VAL_SIZE="${VAL_SIZE:-32}"
SERVERS="${SERVERS:-market}"
COMPLEXITIES="${COMPLEXITIES:-single}"
TEMPLATES="${TEMPLATES-close_price,close_by_name,crypto_close_by_name,revenue}"

if [[ ! -f "$DATA/train.parquet" || ! -f "$DATA/validation.parquet" ]]; then
    "$python" -m skyrl_integrations.datasets.rule_based --output-dir "$DATA" --train-size "$TRAIN_SIZE" \
        --val-size "$VAL_SIZE" --servers "$SERVERS" --complexities "$COMPLEXITIES" \
        ${TEMPLATES:+--templates "$TEMPLATES" --balance-templates} --seed 0
    "$python" -m skyrl_integrations.datasets.validate "$DATA/train.parquet" "$DATA/validation.parquet"
fi

# glibc raises its mmap threshold to the size of every large block freed (up to 32 MiB); after that the hf engine's KV
# buffers, prefix-cache blocks and activations come from the malloc arenas, where what is freed between live blocks
# stays resident. Fixed at 1 MiB, an eval of this job peaks at 3.1-3.6 GB instead of 3.6-4.1 GB. The cost is a page
# fault per page of every large allocation: in the GRPO-vs-TRL benchmark's setting (32 rows per decode step) it made
# generation 20-28% slower, which is why it is this job's setting and not the engine's (benchmarks/README.md).
export MALLOC_MMAP_THRESHOLD_="${MALLOC_MMAP_THRESHOLD_:-1048576}"
"$python" -m skyrl_train.entrypoints.main_base --config "$repo_root/examples/mcp/grpo.yaml" \
    data.train_data="[$DATA/train.parquet]" \
    data.val_data="[$DATA/validation.parquet]" \
    +environment.skyrl_gym.mcp_tool.demonstrations="$repo_root/examples/mcp/demonstrations.json" \
    trainer.ckpt_path="$OUT/ckpts" \
    trainer.export_path="$OUT/exports" \
    "$@"

"$repo_root/.venv/bin/skyrl-analyze-evals" "$OUT/exports" --html "$OUT/exports/report/evals.html"
echo "report: $OUT/exports/report/summary.md (eval per template before/after and over training, plots)"
echo "trajectories: $OUT/exports/report/evals.html (per template and step, failure categories with examples)"
