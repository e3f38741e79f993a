#!/usr/bin/env bash
# GRPO on tau-bench (tau2) with a simulated user, proving the pipeline end to end on the CPU: the default model is
# both the agent and the user simulator (`python -m skyrl_train.serve`, started here on a free port, stopped at exit;
# ~0.5 s per token on 2 shared cores, ~30 minutes in all). The recipe is examples/tau_bench/grpo.yaml; this script
# makes the data, starts the user simulator and trains; `skyrl-analyze-evals $OUT/exports` reads the evals.
#
#   bash examples/tau_bench/run_tau_bench.sh                    # CPU defaults
#   bash examples/tau_bench/run_tau_bench.sh trainer.epochs=2   # extra arguments: config overrides or --config presets
#
# Environment knobs: OUT (output folder), DOMAIN (retail | airline), TRAIN_SIZE / TEST_SIZE (training / test questions
# taken from the official splits, default 2 each; empty = all), USER_BASE_URL + USER_MODEL (an existing
# OpenAI-compatible endpoint as the user simulator instead of starting one; USER_API_KEY or OPENAI_API_KEY for its
# key), USER_STRATEGY (llm | react | verify | reflection). Bigger settings: examples/README.md.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bash "$repo_root/scripts/setup.sh"
python="$repo_root/.venv/bin/python"

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

"$python" -m skyrl_train.entrypoints.main_base --config "$repo_root/examples/tau_bench/grpo.yaml" \
    data.train_data="[$DATA/train.jsonl]" \
    data.val_data="[$DATA/test.jsonl]" \
    +environment.skyrl_gym.tau_bench.demonstrations="$repo_root/examples/tau_bench/demonstrations.json" \
    +environment.skyrl_gym.tau_bench.user.base_url="$USER_BASE_URL" \
    +environment.skyrl_gym.tau_bench.user.model="$USER_MODEL" \
    +environment.skyrl_gym.tau_bench.user.strategy="$USER_STRATEGY" \
    trainer.ckpt_path="$OUT/ckpts" \
    trainer.export_path="$OUT/exports" \
    trainer.run_name="grpo_smollm2_lora_$DOMAIN" \
    "$@"

echo "report: $OUT/exports/report/summary.md"
echo "trajectories: $repo_root/.venv/bin/skyrl-analyze-evals $OUT/exports --html $OUT/exports/report/evals.html"
