#!/usr/bin/env bash
# GRPO on tau-bench retail (tau2) with a simulated user. The agent (policy) talks to a user simulator and calls the
# retail tools in-process on its own copy of the store's database; the reward is 1 when the final database equals
# the one the task's gold actions produce (and the required facts were told to the user), else 0.
#
# CPU defaults prove the pipeline end to end; no uplift is expected from a 135M model on CPU:
# - policy: the default model (SmolLM2-135M-Instruct, fp32) with LoRA (the shared recipe, examples/cpu_lora_grpo.sh);
# - user simulator: the same default model behind `python -m skyrl_train.serve`, started by this script (an
#   OpenAI-compatible endpoint on a free port; stopped at exit);
# - data: the official retail train split, first TRAIN_SIZE (2) tasks, so 1 GRPO step of 2 tasks x 4 samples; eval
#   (greedy, before and after training) on the first TEST_SIZE (2) tasks of the official test split;
# - small context: the tools as one line each, the policy left out (include_policy=false), one demonstration,
#   at most 3 agent turns, 64 new tokens per turn (user: 24), micro-batches of 1 (long multi-turn sequences:
#   larger micro-batches ran out of memory on a 23 GB machine).
# On 2 shared CPU cores the user simulator is the slow part (~0.5 s per token under load): ~30 min in all.
#
#   bash examples/tau_bench/run_tau_bench.sh                      # CPU defaults
#   bash examples/tau_bench/run_tau_bench.sh trainer.epochs=2     # any extra argument is a config override
#
# Environment knobs: OUT (output folder), DOMAIN (retail | airline), TRAIN_SIZE / TEST_SIZE (tasks taken from the
# official splits; empty = all), USER_BASE_URL + USER_MODEL (use an existing OpenAI-compatible endpoint as the user
# simulator instead of starting one; USER_API_KEY or OPENAI_API_KEY for its key), USER_STRATEGY (llm | react |
# verify | reflection).
#
# On a GPU cluster with a strong user model, e.g. gpt-4.1 as the user, all train tasks, the full policy and schemas:
#   TRAIN_SIZE= TEST_SIZE= USER_BASE_URL=https://api.openai.com/v1 USER_MODEL=gpt-4.1 \
#   bash examples/tau_bench/run_tau_bench.sh trainer.policy.model.path=Qwen/Qwen2.5-7B-Instruct trainer.bf16=true \
#       trainer.train_batch_size=32 trainer.policy_mini_batch_size=8 generator.n_samples_per_prompt=8 \
#       generator.max_num_seqs=256 generator.max_turns=30 generator.sampling_params.max_generate_length=1024 \
#       trainer.max_prompt_length=8192 generator.max_input_length=32768 trainer.epochs=10 trainer.eval_interval=5 \
#       generator.eval_n_samples_per_prompt=4 \
#       environment.skyrl_gym.tau_bench.include_policy=true environment.skyrl_gym.tau_bench.tool_prompt=full \
#       environment.skyrl_gym.tau_bench.demonstrations=[] environment.skyrl_gym.tau_bench.max_turns=30
# (eval with 4 samples per task gives pass^1..pass^4 in the analysis CLI: skyrl-analyze-evals $OUT/exports).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bash "$repo_root/scripts/setup.sh"
python="$repo_root/.venv/bin/python"
# shellcheck source=../cpu_lora_grpo.sh
source "$repo_root/examples/cpu_lora_grpo.sh"

OUT="${OUT:-$repo_root/outputs/tau_bench}"
DOMAIN="${DOMAIN:-retail}"
TRAIN_SIZE="${TRAIN_SIZE-2}"
TEST_SIZE="${TEST_SIZE-2}"
USER_STRATEGY="${USER_STRATEGY:-llm}"
DATA="$OUT/data/$DOMAIN"
mkdir -p "$OUT"

"$python" -m skyrl_integrations.tau_bench.convert_data --domain "$DOMAIN" --output_dir "$DATA/all"
take() { # take FILE N: the first N rows of FILE (all when N is empty)
    if [[ -z "$2" ]]; then cat "$1"; else head -n "$2" "$1"; fi
}
take "$DATA/all/train.jsonl" "$TRAIN_SIZE" >"$DATA/train.jsonl"
take "$DATA/all/test.jsonl" "$TEST_SIZE" >"$DATA/test.jsonl"

user_pid=""
cleanup() { if [[ -n "$user_pid" ]]; then kill "$user_pid" 2>/dev/null || true; wait "$user_pid" 2>/dev/null || true; fi; }
trap cleanup EXIT
if [[ -z "${USER_BASE_URL:-}" ]]; then
    USER_MODEL="${USER_MODEL:-smollm2-135m-instruct}"
    log="$OUT/user_simulator.log"
    "$python" -m skyrl_train.serve --model "$USER_MODEL" --port 0 --max-num-seqs 16 --log-level warning >"$log" 2>&1 &
    user_pid=$!
    for _ in $(seq 600); do
        USER_BASE_URL="$(sed -n 's/^serving .* at //p' "$log" | head -n 1)"
        [[ -n "$USER_BASE_URL" ]] && break
        kill -0 "$user_pid" 2>/dev/null || { cat "$log" >&2; echo "the user simulator server did not start" >&2; exit 1; }
        sleep 1
    done
    [[ -n "$USER_BASE_URL" ]] || { echo "the user simulator server did not start in 600 s" >&2; exit 1; }
    echo "user simulator: $USER_MODEL at $USER_BASE_URL"
fi
if [[ -z "${USER_MODEL:-}" ]]; then
    echo "USER_BASE_URL is set: set USER_MODEL to the model name that endpoint serves" >&2
    exit 1
fi
export OPENAI_API_KEY="${USER_API_KEY:-${OPENAI_API_KEY:-EMPTY}}"

"$python" -m skyrl_train.entrypoints.main_base "${CPU_LORA_GRPO_OVERRIDES[@]}" \
    data.train_data="[$DATA/train.jsonl]" \
    data.val_data="[$DATA/test.jsonl]" \
    environment.env_class=tau_bench \
    +environment.skyrl_gym.tau_bench.include_policy=false \
    +environment.skyrl_gym.tau_bench.tool_prompt=compact \
    +environment.skyrl_gym.tau_bench.max_turns=3 \
    +environment.skyrl_gym.tau_bench.demonstrations="$repo_root/examples/tau_bench/demonstrations.json" \
    +environment.skyrl_gym.tau_bench.user.kind=llm \
    +environment.skyrl_gym.tau_bench.user.base_url="$USER_BASE_URL" \
    +environment.skyrl_gym.tau_bench.user.model="$USER_MODEL" \
    +environment.skyrl_gym.tau_bench.user.strategy="$USER_STRATEGY" \
    +environment.skyrl_gym.tau_bench.user.max_tokens=24 \
    +environment.skyrl_gym.tau_bench.user.temperature=0.0 \
    +environment.skyrl_gym.tau_bench.user.timeout_s=600 \
    trainer.train_batch_size=2 \
    trainer.policy_mini_batch_size=2 \
    trainer.micro_train_batch_size_per_gpu=1 \
    trainer.micro_forward_batch_size_per_gpu=1 \
    trainer.eval_batch_size=16 \
    trainer.eval_interval=1 \
    trainer.max_prompt_length=1536 \
    generator.max_input_length=2048 \
    "${CPU_TOOL_CALL_OVERRIDES[@]}" \
    trainer.ckpt_interval=1 \
    trainer.ckpt_path="$OUT/ckpts" \
    trainer.export_path="$OUT/exports" \
    trainer.project_name=tau_bench_cpu \
    trainer.run_name="grpo_smollm2_lora_$DOMAIN" \
    "$@"

echo "report: $OUT/exports/report/summary.md"
echo "trajectories: $repo_root/.venv/bin/skyrl-analyze-evals $OUT/exports --html $OUT/exports/report/evals.html"
