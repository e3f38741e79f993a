#!/usr/bin/env bash
# GRPO step time vs TRL (see compare.py). TRL is a benchmark-only dependency: it goes into its own venv,
# benchmarks/grpo_vs_trl/.venv-trl, built here on first use, never into the project's .venv. That venv is
# constrained to the exact versions of the project's venv (torch, transformers, peft, ...), so both trainers run on
# the same libraries; compare.py checks it again before measuring. TRL's process peaks near 11 GB RSS in 4
# micro-batches (~21 GB in one batch): give it a machine with nothing else heavy running.
#
#   bash benchmarks/grpo_vs_trl/run.sh --steps 5 --warmup 1 --threads 2 --trl-grad-accum 4
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
here="$repo_root/benchmarks/grpo_vs_trl"
trl_venv="$here/.venv-trl"
trl_spec="trl==1.16.0"

bash "$repo_root/scripts/setup.sh"
if [[ ! -f "$trl_venv/.installed" || "$(cat "$trl_venv/.installed")" != "$trl_spec" ]]; then
    echo "run.sh: building $trl_venv with $trl_spec (once; a few minutes)" >&2
    constraints="$(mktemp)"
    "$repo_root/.venv/bin/python" -m pip freeze --exclude-editable --disable-pip-version-check >"$constraints"
    [[ -x "$trl_venv/bin/python" ]] || "$repo_root/.venv/bin/python" -m venv "$trl_venv"
    "$trl_venv/bin/python" -m pip install --quiet --disable-pip-version-check -c "$constraints" \
        "$trl_spec" torch transformers peft pandas
    rm -f "$constraints"
    echo "$trl_spec" >"$trl_venv/.installed"
fi
exec "$repo_root/.venv/bin/python" "$here/compare.py" --trl-python "$trl_venv/bin/python" "$@"
