"""Shared pieces of the SFT tests: SmolLM2's real tokenizer (the tiny test models share it), a tool conversation in
the `messages` format, and JSONL writing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from skyrl_train.models import DEFAULT_MODEL, load_tokenizer
from skyrl_train.testing import tiny_model, tiny_tokenizer  # noqa: F401

TOOL_CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "Use the tools."},
    {"role": "user", "content": "Price of AAPL?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"type": "function", "function": {"name": "get_price", "arguments": '{"ticker": "AAPL"}'}}],
    },
    {"role": "tool", "content": "187.5"},
    {"role": "assistant", "content": "It is 187.5."},
]
"""A system prompt, a question, a tool call (OpenAI form, arguments as a JSON string), the tool's answer and the final
reply."""


@pytest.fixture(scope="session")
def tokenizer():
    """SmolLM2-135M-Instruct's real tokenizer and chat template."""
    return load_tokenizer(DEFAULT_MODEL)


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path
