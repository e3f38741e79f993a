#!/usr/bin/env bash
# GRPO with LoRA on offline synthetic arithmetic word problems (the gsm8k env), with the default CPU model
# (SmolLM2-135M-Instruct, fp32): 24 GRPO steps of 4 prompts x 4 samples. Evaluates (greedy) on 128 held-out
# problems before and after training and writes a report:
#   $OUT/exports/report/summary.md   (eval reward before vs after, reward / length / KL / timing plots)
#
#   bash examples/gsm8k/run_gsm8k.sh                         # CPU defaults (about 18 minutes on 2 cores)
#   bash examples/gsm8k/run_gsm8k.sh trainer.epochs=3 ...   # any extra argument is a config override
#
# On a machine with a GPU the same command trains and generates on it in bf16 (trainer.device=auto, trainer.bf16 unset;
# skyrl-train/docs/gpu.md). Bigger settings go through overrides, e.g. a bigger model and batch sizes (several GPUs:
# trainer.strategy=fsdp2, skyrl-train/docs/distributed.md):
#   bash examples/gsm8k/run_gsm8k.sh trainer.policy.model.path=Qwen/Qwen2.5-1.5B-Instruct trainer.bf16=true \
#       trainer.train_batch_size=64 trainer.policy_mini_batch_size=16 generator.n_samples_per_prompt=8
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bash "$repo_root/scripts/setup.sh"
python="$repo_root/.venv/bin/python"
# shellcheck source=../cpu_lora_grpo.sh
source "$repo_root/examples/cpu_lora_grpo.sh"

OUT="${OUT:-$repo_root/outputs/gsm8k}"
DATA="$OUT/data"
if [[ ! -f "$DATA/train.parquet" || ! -f "$DATA/validation.parquet" ]]; then
    "$python" -m skyrl_gym.envs.gsm8k.synthetic_data --output-dir "$DATA" --train-size 96 --val-size 128 \
        --max-ops 1 --max-value 20 --few-shot 1 --seed 0
fi

"$python" -m skyrl_train.entrypoints.main_base "${CPU_LORA_GRPO_OVERRIDES[@]}" \
    data.train_data="[$DATA/train.parquet]" \
    data.val_data="[$DATA/validation.parquet]" \
    trainer.eval_batch_size=128 \
    trainer.eval_interval=24 \
    trainer.max_prompt_length=384 \
    generator.max_turns=1 \
    generator.sampling_params.max_generate_length=64 \
    generator.eval_sampling_params.max_generate_length=64 \
    trainer.ckpt_interval=12 \
    trainer.ckpt_path="$OUT/ckpts" \
    trainer.export_path="$OUT/exports" \
    trainer.project_name=gsm8k_cpu \
    trainer.run_name=grpo_smollm2_lora \
    "$@"

echo "report: $OUT/exports/report/summary.md"
