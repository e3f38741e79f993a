"""Builders of hand-made dump rows and dump folders for the analysis tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

PROMPT = [{"role": "system", "content": "Use the tools."}, {"role": "user", "content": "Do the task."}]


def _make_row(
    score: float | list[float] = 0.0,
    *response: tuple[str, str],
    instance: str = "p0",
    repetition: int = 0,
    data_source: str = "env_a",
    stop_reason: str | None = "stop",
    **fields: Any,
) -> dict[str, Any]:
    """A row as this fork dumps it. `response` is (role, content) pairs after the prompt (default: one
    assistant turn "Done."); `fields` add or override keys (e.g. tool_calls=2, env_metrics={...})."""
    turns = [{"role": role, "content": content} for role, content in response or [("assistant", "Done.")]]
    row = {
        "input_prompt": f"<|im_start|>user\nDo the task {instance}.<|im_end|>\n<|im_start|>assistant\n",
        "output_response": "\n".join(message["content"] for message in turns),
        "score": score,
        "stop_reason": stop_reason,
        "env_class": "mcp_tool",
        "env_extras": {"data_source": data_source},
        "data_source": data_source,
        "trajectory_id": {"instance_id": instance, "repetition_id": repetition},
        "messages": PROMPT + turns,
        "num_prompt_messages": len(PROMPT),
        "num_turns": sum(message["role"] == "assistant" for message in turns),
    }
    row.update(fields)
    return row


def _write_dump(folder: Path, rows_by_file: dict[str, list[dict[str, Any]]], metrics: bool = True) -> Path:
    """Write `<name>.jsonl` files (and `aggregated_results.jsonl`) into `folder`; returns it."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in rows_by_file.items():
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    if metrics:
        (folder / "aggregated_results.jsonl").write_text(json.dumps({"eval/all/pass_at_1": 0.5}) + "\n")
    return folder


@pytest.fixture
def make_row():
    """`make_row(score, *(role, content), instance="p0", repetition=0, data_source="env_a", stop_reason="stop",
    **fields)`: one dump row in this fork's format."""
    return _make_row


@pytest.fixture
def write_dump():
    """`write_dump(folder, {"env_a": [rows]}, metrics=True)`: a step folder of JSONL dumps."""
    return _write_dump
