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
