#!/usr/bin/env bash
# Main job: an SFT warm start, then GRPO, on MCP tool-use questions against the bundled offline market-data MCP server:
# 60-81 minutes from a fresh clone on a 2-core CPU in fp32, setup included (runs W10-W12, docs/results.md). The
# recipe, with the reason for each value, is examples/mcp/grpo.yaml; this script makes the data, trains, and writes the
# reports: $OUT/exports/report/summary.md (eval per template before vs after, the curve),
# $OUT/exports/report/held_out.md (pass@1 per template and entity split, seen / unseen, at every eval, beside the best
# question-agnostic rule) and $OUT/exports/report/evals.html (per template and step, failure categories).
#
#   bash examples/mcp/run_grpo.sh                        # CPU defaults
#   bash examples/mcp/run_grpo.sh trainer.epochs=2 ...   # extra arguments: config overrides or --config presets
#   ENGINE=vllm bash examples/mcp/run_grpo.sh            # rollouts from vLLM's CPU build (examples/cpu_vllm.yaml)
#
# Environment knobs: OUT (output folder), TRAIN_SIZE / VAL_SIZE (training / held-out questions generated), TEMPLATES
# (question templates; `python -m skyrl_integrations.datasets.rule_based --help`), SERVERS, COMPLEXITIES,
# HELD_OUT_ENTITIES (1: held-out questions name companies and months no training question names; 0: split by question
# hash, for templates that do not hold entities out), SEEN_VAL_SIZE (with HELD_OUT_ENTITIES=1: more held-out questions
# about training entities, the "seen" split), HINT_FRACTION (share of the training questions that end with a hint
# naming the tools and the field, default half; held-out questions never do), WARM_START_SIZE / WARM_START_RECOVERY
# (how many demonstrations $OUT/data/warm_start.jsonl holds, default as many as training questions, 0 for none, and
# the share of them that recover from a tool error). The demonstrations (`python -m
# skyrl_integrations.datasets.demonstrations --help`) are episodes a scripted solver plays through the env and the
# server on questions of their own about training entities ($OUT/data/warm_start_questions), written as the generator
# sees an episode, for the supervised warm start before GRPO (0: GRPO from the base model). The data,
# the rule baseline ($OUT/data/rule_baseline.json) and the demonstrations are made once into $OUT/data: change OUT (or
# delete that folder) after changing them.
# Bigger settings: examples/README.md.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bash "$repo_root/scripts/setup.sh"
python="$repo_root/.venv/bin/python"
if [[ "${ENGINE:-hf}" == vllm ]]; then
    bash "$repo_root/scripts/setup_vllm.sh"
    python="$repo_root/.venv/vllm/bin/python"
    # vLLM engines receive the LoRA adapter only, not base weights with the warm start folded in: RL goes on training
    # the warm-start adapter, with the base model as the KL reference (docs: skyrl-train/docs/sft.md).
    set -- --config "$repo_root/examples/cpu_vllm.yaml" trainer.warm_start_reference=base "$@"
fi

OUT="${OUT:-$repo_root/outputs/mcp}"
DATA="$OUT/data"
TRAIN_SIZE="${TRAIN_SIZE:-72}"
VAL_SIZE="${VAL_SIZE:-64}" # 16 per template
SEEN_VAL_SIZE="${SEEN_VAL_SIZE:-16}"
SERVERS="${SERVERS:-market}"
COMPLEXITIES="${COMPLEXITIES:-single,multi_step}"
TEMPLATES="${TEMPLATES-price_field,price_field_by_name,financial_field,month_end_close}"
HELD_OUT_ENTITIES="${HELD_OUT_ENTITIES:-1}"
# Hints on half the training questions, trained without them (grpo.yaml: generator.train_without_hints): with them and
# the ptx term GRPO ended above its warm start (run W9, docs/results.md); the demonstrations never have one.
HINT_FRACTION="${HINT_FRACTION:-0.5}"
WARM_START_SIZE="${WARM_START_SIZE:-}"
WARM_START_RECOVERY="${WARM_START_RECOVERY:-0.25}"
split_args=()
if [[ "$HELD_OUT_ENTITIES" == 1 ]]; then
    split_args=(--held-out-entities --seen-val-size "$SEEN_VAL_SIZE")
fi

if [[ ! -f "$DATA/train.parquet" || ! -f "$DATA/validation.parquet" ]]; then
    "$python" -m skyrl_integrations.datasets.rule_based --output-dir "$DATA" --train-size "$TRAIN_SIZE" \
        --val-size "$VAL_SIZE" --servers "$SERVERS" --complexities "$COMPLEXITIES" \
        ${TEMPLATES:+--templates "$TEMPLATES" --balance-templates} "${split_args[@]}" --hint-fraction "$HINT_FRACTION" \
        --seed 0
    "$python" -m skyrl_integrations.datasets.validate "$DATA/train.parquet" "$DATA/validation.parquet"
fi
# The best question-agnostic rules on the held-out questions (their rows name the entity as written): the bar a
# trained policy has to clear, shown beside it in held_out.md.
baseline_args=()
if [[ "$HELD_OUT_ENTITIES" == 1 ]]; then
    if [[ ! -f "$DATA/rule_baseline.json" ]]; then
        "$python" -m skyrl_integrations.analysis.rule_baseline "$DATA/validation.parquet" \
            --json "$DATA/rule_baseline.json"
    fi
    baseline_args=(--rule-baseline "$DATA/rule_baseline.json")
fi
# Demonstrations for the warm start, played with the env settings the training command resolves
# (environment.skyrl_gym.mcp_tool and generator.max_turns; tests/test_example_presets.py checks that they agree), on
# questions of their own: training entities, no hints (as held-out questions come), none that RL trains on
# (demonstrated ones scored 1.0 in every sample after the warm start, so their groups carried no signal: run W1) or
# that the evals ask.
if [[ "$WARM_START_SIZE" != 0 && ! -f "$DATA/warm_start.jsonl" ]]; then
    "$python" -m skyrl_integrations.datasets.rule_based --output-dir "$DATA/warm_start_questions" \
        --train-size "$((2 * ${WARM_START_SIZE:-$TRAIN_SIZE}))" --val-size 0 --servers "$SERVERS" \
        --complexities "$COMPLEXITIES" ${TEMPLATES:+--templates "$TEMPLATES" --balance-templates} "${split_args[@]}" \
        --hint-fraction 0 --seed 1 --no-jsonl --overwrite
    warm_start_env='{"max_calls_per_turn": 1, "reward_weights": {"format": 0, "tools": 0, "params": 0}, '
    warm_start_env+='"last_turn_note": "", '
    warm_start_env+="\"demonstrations\": \"$repo_root/examples/mcp/demonstrations.json\"}"
    "$python" -m skyrl_integrations.datasets.demonstrations --data "$DATA/warm_start_questions/train.parquet" \
        --exclude "$DATA/train.parquet" --exclude "$DATA/validation.parquet" --output "$DATA/warm_start.jsonl" \
        --env-config "$warm_start_env" --max-turns 3 --limit "${WARM_START_SIZE:-$TRAIN_SIZE}" \
        --recovery-fraction "$WARM_START_RECOVERY"
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
    trainer.warm_start="$([[ "${WARM_START_SIZE:-}" == 0 ]] && echo false || echo true)" \
    sft.train_data="$([[ "${WARM_START_SIZE:-}" == 0 ]] && echo '[]' || echo "[$DATA/warm_start.jsonl]")" \
    trainer.ckpt_path="$OUT/ckpts" \
    trainer.export_path="$OUT/exports" \
    "$@"

"$repo_root/.venv/bin/skyrl-analyze-evals" "$OUT/exports" --html "$OUT/exports/report/evals.html" \
    --markdown "$OUT/exports/report/held_out.md" "${baseline_args[@]}"
echo "report: $OUT/exports/report/summary.md (eval per template before/after and over training, plots)"
echo "held-out: $OUT/exports/report/held_out.md (per template and entity split, beside the best question-agnostic rule)"
echo "trajectories: $OUT/exports/report/evals.html (per template and step, failure categories with examples)"
