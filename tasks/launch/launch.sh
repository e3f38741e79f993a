#!/usr/bin/env bash
# Launch tasks/TASK.yaml on cluster CLUSTER with bounded retries when no cloud has capacity.
#
#   tasks/launch/launch.sh TASK CLUSTER [more `sky launch` arguments...]
#
# Each attempt is one `sky launch` (attached: the job's logs stream here; `--down`: the cluster tears itself down when
# the job ends, even if this machine dies). SkyPilot already fails over across the enabled clouds, regions and the
# task's `any_of` GPU choices within an attempt; when every choice is out of capacity the attempt fails with a
# capacity error before the task started, the half-made cluster is taken down, and the next attempt starts after a
# backoff that doubles. Any other failure (the task's setup or job failed, a bad YAML, missing credentials) stops at
# once with that status; so does any failure once the task started (SkyPilot printed "Running setup on" or "Job
# submitted, ID:"), so a job that ran is never launched twice.
#
#   SKY                     the sky command (default: sky)
#   LAUNCH_ATTEMPTS         attempts before giving up on capacity (default 3)
#   LAUNCH_BACKOFF_SECONDS  wait after the first capacity failure, doubled after each (default 120)
#   LAUNCH_SECRETS          names of secrets to pass (`--secret NAME`, value from this environment) when set
#   RAY_AUTH_TOKEN          the Ray token of a task that declares it (default: a fresh random one per launch)
#
# Exit status: sky launch's on success or on a non-capacity failure; 75 when every attempt hit capacity errors.
set -euo pipefail

if [[ $# -lt 2 ]]; then
    echo "usage: $0 TASK CLUSTER [sky launch arguments...]" >&2
    exit 2
fi
task="$1" cluster="$2"
shift 2
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
yaml="$repo_root/tasks/$task.yaml"
[[ -f "$yaml" ]] || { echo "launch: no task $yaml" >&2; exit 2; }
sky="${SKY:-sky}"
attempts="${LAUNCH_ATTEMPTS:-3}"
backoff="${LAUNCH_BACKOFF_SECONDS:-120}"
# What SkyPilot prints when every region, cloud and GPU choice it tried was out of capacity (not: no cloud offers it).
capacity_pattern='ResourcesUnavailableError|Failed to provision all possible launchable resources'
# What SkyPilot (0.14) prints once the cluster is up and the task starts: its setup, then its job. A failure after
# either is the task's own, and the job may already have run (and written checkpoints): it is never launched again,
# whatever the rest of the log says (a job's own output may well mention a capacity error).
started_pattern='Running setup on |Job submitted, ID: '

secret_args=()
for name in ${LAUNCH_SECRETS:-}; do
    if [[ -n "${!name:-}" && "$name" != RAY_AUTH_TOKEN ]]; then secret_args+=(--secret "$name"); fi
done
# Ray token auth across the task's nodes (tasks/node/bootstrap.py): a task declaring the RAY_AUTH_TOKEN secret gets the
# token of this environment, or a fresh random one for this launch, passed to every node as a secret (by name: the
# value never appears on a command line).
if grep -qE '^  RAY_AUTH_TOKEN:' "$yaml"; then
    RAY_AUTH_TOKEN="${RAY_AUTH_TOKEN:-$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')}"
    export RAY_AUTH_TOKEN
    secret_args+=(--secret RAY_AUTH_TOKEN)
fi

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
for ((attempt = 1; attempt <= attempts; attempt++)); do
    echo "launch: attempt $attempt/$attempts: $task on cluster $cluster"
    set +e
    "$sky" launch "$yaml" --cluster "$cluster" --down --yes "${secret_args[@]}" "$@" 2>&1 | tee "$log"
    status="${PIPESTATUS[0]}"
    set -e
    if [[ "$status" == 0 ]]; then
        echo "launch: $task finished on attempt $attempt"
        exit 0
    fi
    if grep -qE "$started_pattern" "$log"; then
        echo "launch: failed with status $status after the task started on the cluster; not retrying" >&2
        exit "$status"
    fi
    if ! grep -qE "$capacity_pattern" "$log"; then
        echo "launch: failed with status $status (not a capacity error); not retrying" >&2
        exit "$status"
    fi
    echo "launch: no capacity on attempt $attempt; taking down what was provisioned" >&2
    "$sky" down --yes "$cluster" || true
    if ((attempt < attempts)); then
        echo "launch: next attempt in ${backoff}s" >&2
        sleep "$backoff"
        backoff=$((backoff * 2))
    fi
done
echo "launch: no capacity for $task after $attempts attempts" >&2
exit 75
