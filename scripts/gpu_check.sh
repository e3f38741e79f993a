#!/usr/bin/env bash
# The GPU check: what this project verifies on one NVIDIA GPU (an H100 or H200), offline, in a few minutes.
#
#   bash scripts/gpu_bundle.sh     # first, on a machine with network: writes .gpu-bundle/ (git-ignored)
#   bash scripts/gpu_check.sh      # on the GPU machine, with .gpu-bundle/ beside the checkout
#
# It installs the bundle's wheels into a temporary folder, runs the project's code from the checkout, builds every
# model from the bundle's tokenizer and config (random weights: nothing is downloaded), then
#   1. the tests marked `gpu` (pytest -m gpu): the device-parameterised tests, which CI runs on the CPU (a policy step
#      on CUDA, LoRA and full, fp32 and bf16, equal to the CPU fp32 step within the dtype's tolerance; the hf engine
#      on CUDA: greedy tokens equal to a CPU forward pass, seeded sampling, prefix cache, KV buffer, LoRA folding in
#      bf16), CUDA IPC to a second process with mixed dtypes, the fsdp2 tests through Ray with one rank per GPU, and
#      the gsm8k recipe with fsdp2 end to end (2 steps, checkpoints, export);
#   2. benchmarks/main_job_step.py: step times of the main job's recipe on a SmolLM2-135M-shaped model.
# Everything it prints goes to $OUT (default: benchmarks/results/gpu/<date>-<card>/): device.txt, tests.log,
# junit.xml, main_job_step.log and .json. Exit status: pytest's, or the benchmark's if the tests passed.
set -uo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bundle="$repo_root/.gpu-bundle"
python="${PYTHON:-python3}"
if [[ ! -d "$bundle/wheels" || ! -d "$bundle/tokenizer" ]]; then
    echo "gpu_check: no $bundle (run scripts/gpu_bundle.sh first, where there is network)" >&2
    exit 2
fi
card="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr -c 'A-Za-z0-9\n' '-' | tr -s '-')"
out="${OUT:-$repo_root/benchmarks/results/gpu/$(date -u +%Y-%m-%d)-${card:-no-gpu}}"
mkdir -p "$out"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$python" -m pip install -q --no-index --no-deps --no-compile --target "$work/site" "$bundle"/wheels/*.whl || exit 2
export PYTHONPATH="$repo_root/skyrl-gym:$repo_root/skyrl-train:$repo_root/integrations:$work/site"
export SKYRL_TEST_TOKENIZER="$bundle/tokenizer" SKYRL_CACHE_DIR="$work/cache" RAY_AUTH_MODE=disabled
export RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false

{
    date -u
    nvidia-smi
    "$python" -c 'import sys, torch, transformers, peft, ray
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "transformers", transformers.__version__, "peft", peft.__version__, "ray", ray.__version__)
print("devices:", [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])'
    git -C "$repo_root" log -1 --format='commit %H %s' 2>/dev/null
    git -C "$repo_root" status --short 2>/dev/null | head -40
} >"$out/device.txt" 2>&1
cat "$out/device.txt"

cd "$repo_root" || exit 2
"$python" -m pytest -m gpu -p no:cacheprovider -q -rs --durations=15 --junitxml="$out/junit.xml" \
    skyrl-gym/tests skyrl-train/tests 2>&1 | tee "$out/tests.log"
status=${PIPESTATUS[0]}

"$python" benchmarks/main_job_step.py --model "$bundle/tokenizer" --random-weights --steps 3 \
    --json "$out/main_job_step.json" 2>&1 | tee "$out/main_job_step.log"
bench=${PIPESTATUS[0]}
echo "gpu_check: tests exit $status, benchmark exit $bench; output in $out"
[[ $status -ne 0 ]] && exit "$status"
exit "$bench"
