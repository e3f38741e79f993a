"""A real `python -m skyrl_train.serve` process, as tests use one for a remote inference engine."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence

from skyrl_train.testing import TEST_CONTROL_TOKEN


def start_server(
    model_path: str,
    served_name: str,
    *,
    cpu_cores: Sequence[int] | None = None,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    lora_root: str | os.PathLike | None = None,
    enable_control: bool = True,
    ready_timeout_s: float = 180,
) -> tuple[subprocess.Popen, str]:
    """Start the server on a free port and return the process and its base URL (no ``/v1``) once it serves.

    With ``enable_control`` the server has its control routes, behind `skyrl_train.testing.TEST_CONTROL_TOKEN`
    (passed in the environment; a trainer using it sets ``generator.remote_inference_engine_control_token`` to it),
    and loads LoRA adapters from folders under ``lora_root``. ``cpu_cores`` pins the process to those cores
    (``os.sched_setaffinity``, what ``taskset`` does); ``env`` adds environment variables to this process's; the
    caller kills the process. Raises `AssertionError` with the end of its output when it does not serve in time.
    """
    command = [sys.executable, "-m", "skyrl_train.serve", "--model", model_path, "--port", "0"]
    command += ["--served-model-name", served_name, "--log-level", "warning"]
    command += ["--enable-control"] if enable_control else []
    command += ["--lora-root", str(lora_root)] if lora_root is not None else []
    command += extra_args
    control_env = {"SKYRL_CONTROL_TOKEN": TEST_CONTROL_TOKEN} if enable_control else {}
    pin = None if cpu_cores is None else (lambda: os.sched_setaffinity(0, set(cpu_cores)))
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=pin,
        env={**os.environ, **(env or {}), **control_env},
    )
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        for line in process.stdout:
            lines.append(line)
            if line.startswith("serving "):
                ready.set()

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(ready_timeout_s):
        process.kill()
        raise AssertionError("the server did not start:\n" + "".join(lines[-30:]))
    url = next(line for line in lines if line.startswith("serving ")).rsplit(" at ", 1)[1].strip()
    return process, url.removesuffix("/v1")
