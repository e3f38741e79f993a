"""Fixtures shared by the dataset tests.

- ``make_task``: builds a valid single-step market ``TaskRow`` (the offline market server's real AAPL close).
- ``serve_openai(model)``: runs the project's OpenAI-compatible server (``python -m skyrl_train.serve``) on a free
  port as a subprocess and yields its base URL; used by session fixtures for the tiny and the default model.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skyrl_integrations.datasets.schema import TaskRow, ToolStep
from skyrl_train.models import DEFAULT_MODEL
from skyrl_train.testing import tiny_model  # noqa: F401

SERVER_START_TIMEOUT_S = 300


def _make_task(task_id: str = "market-0001", **overrides) -> TaskRow:
    fields = {
        "task_id": task_id,
        "system_prompt": "You answer by calling tools.",
        "user_prompt": "What was AAPL's closing price on 2024-03-15?",
        "tool_sequence": [ToolStep(1, "market", "get_stock_price", {"ticker": "AAPL", "date": "2024-03-15"})],
        "expected_answer": "176.78",  # the offline market server's AAPL close that day
        "answer_match": "numeric",
    }
    fields.update(overrides)
    return TaskRow(**fields)


@pytest.fixture
def make_task():
    """``make_task(task_id="market-0001", **TaskRow fields)`` → a valid ``TaskRow``."""
    return _make_task


@contextlib.contextmanager
def serve_openai(model: str, log_dir: Path):
    """The base URL (``http://127.0.0.1:<port>/v1``) of ``python -m skyrl_train.serve --model <model>``."""
    log = log_dir / "serve.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "skyrl_train.serve", "--model", model, "--port", "0", "--log-level", "warning"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            text = log.read_text()
            ready = [line for line in text.splitlines() if line.startswith("serving ")]
            if ready:
                yield ready[0].rsplit(" at ", 1)[1].strip()
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"skyrl_train.serve did not start (exit code {process.poll()}):\n{text[-3000:]}")
            time.sleep(0.5)
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def tiny_model_url(tiny_model, tmp_path_factory):  # noqa: F811
    """An OpenAI-compatible server over the tiny random test model (answers are noise, fast)."""
    with serve_openai(tiny_model, tmp_path_factory.mktemp("tiny-serve")) as url:
        yield url


@pytest.fixture(scope="session")
def default_model_url(tmp_path_factory):
    """An OpenAI-compatible server over the real default CPU model (SmolLM2-135M-Instruct); ~20 s to start."""
    with serve_openai(DEFAULT_MODEL, tmp_path_factory.mktemp("default-serve")) as url:
        yield url
