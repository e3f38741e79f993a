# shellcheck shell=bash
# Sourced by the setup scripts (scripts/setup.sh, scripts/setup_vllm.sh, tasks/launch/setup_sky.sh): what they share.

# venv_up_to_date VENV STAMP_FILE WANTED: the venv exists and was last set up for WANTED (a hash of its inputs).
venv_up_to_date() {
    [[ -x "$1/bin/python" && -f "$2" && "$(cat "$2")" == "$3" ]]
}

# base_python: the interpreter new venvs are created with: $SKYRL_PYTHON, else python3.11, else python3.
base_python() {
    if [[ -n "${SKYRL_PYTHON:-}" ]]; then
        echo "$SKYRL_PYTHON"
    elif command -v python3.11 >/dev/null 2>&1; then
        echo python3.11
    else
        echo python3
    fi
}

# wanted_torch_spec: the torch requirement a venv gets before anything else: $SKYRL_TORCH_SPEC, else torch==2.13.0
# (PyPI's Linux x86-64 wheel, a CUDA build; the CPU build comes from a CPU index, see scripts/setup.sh).
wanted_torch_spec() {
    echo "${SKYRL_TORCH_SPEC:-torch==2.13.0}"
}
