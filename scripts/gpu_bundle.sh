#!/usr/bin/env bash
# Prepare, on a machine with network, what the GPU check (scripts/gpu_check.sh) needs on an offline GPU machine that
# has Python 3.12 with CUDA torch, transformers, peft, accelerate and pytest: writes .gpu-bundle/ (git-ignored).
#
#   bash scripts/gpu_bundle.sh
#
#   .gpu-bundle/wheels/     the packages such a machine lacks: Ray (stripped to Ray Core), Hydra, OmegaConf, boto3,
#                           jsonschema, pytest-asyncio; built by $SKYRL_GPU_WHEELS_BUILDER (default: this workplace's
#                           ../shared/gpu-bundle/build_wheels.sh); the project's own packages are not among them, the
#                           check runs them from the checkout
#   .gpu-bundle/tokenizer/  the default model's tokenizer, chat template and config.json, no weights: test models and
#                           the SmolLM2-135M-shaped benchmark model are built from it there
#
# Together with the checkout it stays under the 64 MiB a borrowed GPU machine takes (the script prints the size).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bundle="$repo_root/.gpu-bundle"
builder="${SKYRL_GPU_WHEELS_BUILDER:-$repo_root/../shared/gpu-bundle/build_wheels.sh}"
if [[ ! -f "$builder" ]]; then
    echo "gpu_bundle: no wheel builder at $builder; set SKYRL_GPU_WHEELS_BUILDER to a script that writes the wheels" \
        "an offline GPU machine lacks into the folder given as its second argument" >&2
    exit 1
fi
bash "$repo_root/scripts/setup.sh"
rm -rf "$bundle"
mkdir -p "$bundle/wheels" "$bundle/tokenizer"
bash "$builder" "$repo_root" "$bundle/wheels" >/dev/null
rm -f "$bundle"/wheels/skyrl_*.whl  # the check runs the checkout's own code
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform any -d "$bundle/wheels" "$(grep -E "^pytest-asyncio" "$repo_root/requirements-dev.txt")"
"$repo_root/.venv/bin/python" - "$bundle/tokenizer" <<'PY'
import shutil
import sys
from pathlib import Path

from skyrl_train.models import DEFAULT_MODEL, load_tokenizer, resolve_model_path

source, out = Path(resolve_model_path(DEFAULT_MODEL)), Path(sys.argv[1])
load_tokenizer(source).save_pretrained(out)
for name in ("config.json", "generation_config.json"):
    shutil.copy(source / name, out / name)
PY
du -sh "$bundle"/wheels "$bundle"/tokenizer
echo "gpu_bundle: checkout plus bundle: $(( ($(git -C "$repo_root" ls-files -z | xargs -0 cat | wc -c) + $(du -sb "$bundle" | cut -f1)) / 1048576 )) MiB"
