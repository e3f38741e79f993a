"""`python -m skyrl_train.serve` as a real process: startup line, requests, clean SIGTERM, loud refusals."""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import openai
import pytest

STARTUP_TIMEOUT_S = 120


class ServerProcess:
    """The CLI in a subprocess; `url` is the base URL it printed once ready."""

    def __init__(self, *args: str):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "skyrl_train.serve", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.stderr: list[str] = []
        self._stderr_reader = threading.Thread(target=lambda: self.stderr.extend(self.process.stderr), daemon=True)
        self._stderr_reader.start()
        lines: queue.Queue[str] = queue.Queue()
        self._stdout_reader = threading.Thread(target=lambda: [lines.put(line) for line in self.process.stdout])
        self._stdout_reader.daemon = True
        self._stdout_reader.start()
        try:
            self.url = self._wait_for_url(lines)
        except BaseException:
            self.close()
            raise

    def _wait_for_url(self, lines: queue.Queue) -> str:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=0.5)
            except queue.Empty:
                if self.process.poll() is not None:
                    raise AssertionError(
                        f"server exited with {self.process.returncode}: {''.join(self.stderr)}"
                    ) from None
                continue
            match = re.search(r"at (http://\S+/v1)", line)
            if match:
                return match.group(1)
        raise AssertionError("server did not print its URL in time")

    def terminate(self) -> int:
        """SIGTERM; uvicorn shuts down, then re-raises the signal, so a clean stop exits with -SIGTERM."""
        self.process.send_signal(signal.SIGTERM)
        returncode = self.process.wait(timeout=30)
        self._stderr_reader.join(timeout=10)
        return returncode

    def close(self) -> None:
        """Kill the process if it still runs, and release its pipes."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for reader in (self._stdout_reader, self._stderr_reader):
            reader.join(timeout=10)
        self.process.stdout.close()
        self.process.stderr.close()


@pytest.fixture
def tiny_server(tiny_model):
    server = ServerProcess("--model", tiny_model, "--port", "0", "--served-model-name", "tiny")
    yield server
    server.close()


def test_serves_the_model_then_stops_cleanly_on_sigterm(tiny_server):
    sdk = openai.OpenAI(base_url=tiny_server.url, api_key="unused", max_retries=0)  # pragma: allowlist secret
    result = sdk.completions.create(model="tiny", prompt=[1, 2, 3], max_tokens=3, extra_body={"ignore_eos": True})
    assert result.usage.completion_tokens == 3
    assert tiny_server.terminate() == -signal.SIGTERM
    assert "engine torn down" in "".join(tiny_server.stderr)


def test_default_served_model_name_is_the_model_argument(tiny_model):
    server = ServerProcess("--model", tiny_model, "--port", "0", "--log-level", "warning")
    try:
        sdk = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)  # pragma: allowlist secret
        assert [m.id for m in sdk.models.list().data] == [tiny_model]
    finally:
        server.close()


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("SKYRL_API_KEY", "SKYRL_CONTROL_TOKEN")}
    return subprocess.run(
        [sys.executable, "-m", "skyrl_train.serve", *args], capture_output=True, text=True, timeout=120, env=env
    )


def test_the_vllm_backend_is_refused_loudly(tiny_model):
    result = run_cli("--model", tiny_model, "--backend", "vllm")
    assert result.returncode == 2
    assert "--backend vllm is not available" in result.stderr and "use --backend hf" in result.stderr


def test_a_taken_port_fails_before_loading_the_model(tiny_model):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = run_cli("--model", tiny_model, "--port", str(port))
    assert result.returncode == 1
    assert f"error: cannot listen on 127.0.0.1:{port}: Address already in use" in result.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--enable-control"], "--enable-control needs a control token: set SKYRL_CONTROL_TOKEN"),
        (["--lora-root", "/tmp"], "--lora-root has no effect without --enable-control"),
        (["--control-token", "t"], "--control-token has no effect without --enable-control"),
        (["--max-n", "0"], "--max-n must be at least 1, got 0"),
    ],
)
def test_control_without_a_token_and_flags_that_do_nothing_are_refused_before_loading(args, message):
    result = run_cli("--model", "/no/such/model", *args)
    assert result.returncode == 2
    assert message in result.stderr


def test_an_unimportable_tool_call_parser_is_refused(tiny_model):
    result = run_cli("--model", tiny_model, "--tool-call-parser", "no_such_module:parse")
    assert result.returncode == 2
    assert "--tool-call-parser no_such_module:parse" in result.stderr and "No module named" in result.stderr


def test_the_default_cpu_model_answers_a_chat_with_text():
    server = ServerProcess("--model", "smollm2-135m-instruct", "--port", "0", "--log-level", "warning")
    try:
        sdk = openai.OpenAI(
            base_url=server.url, api_key="unused", max_retries=0, timeout=120  # pragma: allowlist secret
        )  # pragma: allowlist secret
        result = sdk.chat.completions.create(
            model="smollm2-135m-instruct",
            messages=[{"role": "user", "content": "What is the capital of France?"}],
            max_tokens=12,
            temperature=0,
        )
        assert result.choices[0].message.content.strip()
    finally:
        server.close()
