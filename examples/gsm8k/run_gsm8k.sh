#!/usr/bin/env bash
# GRPO with LoRA on offline synthetic arithmetic word problems (about 18 minutes on 2 CPU cores). The recipe is
# examples/gsm8k/grpo.yaml; this script makes the data, trains, and writes the report: $OUT/exports/report/summary.md
# (eval reward before vs after, reward / length / KL / timing plots).
#
#   bash examples/gsm8k/run_gsm8k.sh                        # CPU defaults
#   bash examples/gsm8k/run_gsm8k.sh trainer.epochs=3 ...   # extra arguments: config overrides or --config presets
#
# Environment knob: OUT (output folder). Bigger settings: examples/README.md.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bash "$repo_root/scripts/setup.sh"
python="$repo_root/.venv/bin/python"

OUT="${OUT:-$repo_root/outputs/gsm8k}"
DATA="$OUT/data"
if [[ ! -f "$DATA/train.parquet" || ! -f "$DATA/validation.parquet" ]]; then
    "$python" -m skyrl_gym.envs.gsm8k.synthetic_data --output-dir "$DATA" --train-size 96 --val-size 128 \
        --max-ops 1 --max-value 20 --few-shot 1 --seed 0
fi

"$python" -m skyrl_train.entrypoints.main_base --config "$repo_root/examples/gsm8k/grpo.yaml" \
    data.train_data="[$DATA/train.parquet]" \
    data.val_data="[$DATA/validation.parquet]" \
    trainer.ckpt_path="$OUT/ckpts" \
    trainer.export_path="$OUT/exports" \
    "$@"

echo "report: $OUT/exports/report/summary.md"
