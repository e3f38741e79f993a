#!/usr/bin/env bash
# The `sky launch` arguments of one launch workflow run (.github/workflows/launch.yaml), from its inputs; printed one
# argument a line (read them with `mapfile -t args < <(...)`). A combination the task cannot take is refused with
# exit status 2 and a message naming the inputs.
#
#   TASK=eval CHECKPOINT=s3://b/p/run/global_step_40 RUN_NAME=eval-1 bash tasks/launch/launch_args.sh
#
# Inputs (environment; empty = not given): TASK, RUN_NAME, NODES, MODEL, CHECKPOINT, RESUME_RUN_NAME, DATA_VERSION,
# USER_BASE_URL, USER_MODEL.
#   eval:       exactly one of CHECKPOINT (a training run's s3://.../global_step_N), MODEL (HF folder or id) or
#               RESUME_RUN_NAME (the training run whose eval dumps to analyse: EVAL_RUN_NAME); 1 node.
#   the others: MODEL and RESUME_RUN_NAME as given, --num-nodes NODES; DATA_VERSION for grpo only, USER_BASE_URL and
#               USER_MODEL for tau_bench only (required there).
set -euo pipefail

refuse() {
    echo "launch_args: $1" >&2
    exit 2
}
: "${TASK:?TASK is not set}" "${RUN_NAME:?RUN_NAME is not set}"
for name in NODES MODEL CHECKPOINT RESUME_RUN_NAME DATA_VERSION USER_BASE_URL USER_MODEL; do
    printf -v "$name" '%s' "${!name:-}"
done
args=(--env "RUN_NAME=$RUN_NAME")
if [[ "$TASK" == eval ]]; then
    given=$(((${#CHECKPOINT} > 0) + (${#MODEL} > 0) + (${#RESUME_RUN_NAME} > 0)))
    ((given == 1)) || refuse "eval takes exactly one of checkpoint, model or resume_run_name (the run to analyse)"
    [[ -z "$NODES" || "$NODES" == 1 ]] || refuse "eval runs on 1 node (nodes=$NODES)"
    [[ -z "$CHECKPOINT" ]] || args+=(--env "CHECKPOINT=$CHECKPOINT")
    [[ -z "$MODEL" ]] || args+=(--env "MODEL=$MODEL")
    [[ -z "$RESUME_RUN_NAME" ]] || args+=(--env "EVAL_RUN_NAME=$RESUME_RUN_NAME")
else
    [[ -z "$CHECKPOINT" ]] || refuse "checkpoint is read by the eval task only ($TASK resumes with resume_run_name)"
    args+=(--num-nodes "${NODES:-1}")
    [[ -z "$MODEL" ]] || args+=(--env "MODEL=$MODEL")
    [[ -z "$RESUME_RUN_NAME" ]] || args+=(--env "RESUME_RUN_NAME=$RESUME_RUN_NAME")
fi
if [[ "$TASK" == tau_bench ]]; then
    [[ -n "$USER_BASE_URL" && -n "$USER_MODEL" ]] || refuse "tau_bench needs user_base_url and user_model"
    args+=(--env "USER_BASE_URL=$USER_BASE_URL" --env "USER_MODEL=$USER_MODEL")
elif [[ -n "$USER_BASE_URL$USER_MODEL" ]]; then
    refuse "user_base_url and user_model are read by the tau_bench task only"
fi
if [[ -n "$DATA_VERSION" ]]; then
    [[ "$TASK" == grpo ]] || refuse "data_version is read by the grpo task only ($TASK has no S3 dataset)"
    args+=(--env "DATA_VERSION=$DATA_VERSION")
fi
printf '%s\n' "${args[@]}"
