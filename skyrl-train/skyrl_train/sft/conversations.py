"""SFT rows: conversations in the chat `messages` format, read and checked row by row.

A row holds a list of messages under ``sft.messages_key`` (default ``messages``), the format of TRL's conversational
datasets and OpenAI's chat API; the prompt is every message before the first assistant message. A row may instead hold
TRL's conversational prompt-completion form, ``prompt`` and ``completion`` lists: the prompt is the whole ``prompt``
list, assistant messages included (e.g. worked examples an env puts into its opening), and the ``completion`` starts
with an assistant message. Messages are:

- ``{"role": "system" | "user" | "tool", "content": str}``: prompt and observations (what an env returns, e.g. the MCP
  env's ``user`` messages with tool results, or ``tool`` messages);
- ``{"role": "assistant", "content": str}``: what the model says, tool calls written into the text as the model
  emits them (e.g. ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``);
- ``{"role": "assistant", "content": str | null, "tool_calls": [{"type": "function", "function": {"name": str,
  "arguments": {...} or a JSON string of an object}}, ...]}``: the calls are rendered into the text (`tool_call_text`,
  after the content, one call per line).

An assistant message of the completion may carry OpenAI's fine-tuning ``weight``: 0 keeps it in the context
but out of the loss (e.g. a deliberate mistake the conversation then recovers from), 1 (the default) trains on it.
Other fields of a message (``name``, ``tool_call_id``, ...) are passed to the chat template unchanged, as the generator
passes an env's messages. An optional per-row list of tool schemas sits under ``sft.tools_key`` (default ``tools``).

Refused, with the file, the row and the field: a row without a message list, a message that is not a mapping, an
unknown role, content that is not a string, ``tool_calls`` on a message other than an assistant's, a tool call without
a function name or whose arguments are not a JSON object (a string that does not parse, or parses to anything else),
a ``weight`` other than 0 or 1 or on a message that is not a completion's assistant message, a conversation with no
assistant message of weight 1 or with an empty prompt (the generator always has a prompt first), a completion that
does not start with an assistant message, tools that are not a list of mappings. Every bad row of a file (up to `MAX_REPORTED_ROWS`) is reported at once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from skyrl_train.dataset import DatasetValidationError, RowProblem, load_rows
from skyrl_train.dataset.validation import MAX_REPORTED_ROWS, ROLES

__all__ = ["Conversation", "read_conversations", "tool_call_text"]

TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"


def tool_call_text(name: str, arguments: Mapping[str, Any]) -> str:
    """One tool call as the model writes it: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

    This is the call format of this repository's MCP env (its system prompt, `skyrl_integrations.mcp.prompt`, asks for
    it, and `skyrl_integrations.tool_parser` reads it), with the JSON as ``json.dumps`` writes it (``", "`` and ``": "``
    separators, non-ASCII kept). A ``tool_calls`` entry of an SFT row becomes this text, so that the model learns to
    emit the calls the env parses.
    """
    return (
        TOOL_CALL_OPEN + json.dumps({"name": name, "arguments": dict(arguments)}, ensure_ascii=False) + TOOL_CALL_CLOSE
    )


@dataclass(frozen=True)
class Conversation:
    """One checked row: its messages (assistant ``tool_calls`` already written into the content), its tools, and where
    it came from."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    source: str
    row: int
    """Index of the row within its file (0-based)."""
    prompt_length: int
    """How many leading messages are the prompt (the rest starts with an assistant message)."""


def read_conversations(source: str, messages_key: str = "messages", tools_key: str = "tools") -> list[Conversation]:
    """Every row of ``source`` (a ``.jsonl``, ``.json`` or ``.parquet`` file, or a Hugging Face dataset id), checked.

    Raises:
        DatasetValidationError: listing every problem of the first `MAX_REPORTED_ROWS` bad rows, by file, row and field.
    """
    conversations, problems, bad_rows = [], [], 0
    for index, row in enumerate(load_rows(source)):
        found: list[tuple[str, str]] = []
        conversation = _conversation(row, messages_key, tools_key, found)
        if found:
            bad_rows += 1
            if bad_rows <= MAX_REPORTED_ROWS:
                problems += [RowProblem(source, index, field, message) for field, message in found]
        else:
            messages, tools, prompt_length = conversation
            conversations.append(Conversation(messages, tools, source, index, prompt_length))
    if bad_rows:
        raise DatasetValidationError(source, problems, bad_rows)
    return conversations


def _conversation(
    row: Any, messages_key: str, tools_key: str, problems: list[tuple[str, str]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None, int]:
    """The row's messages (tool calls rendered), tools and prompt length; appends (field, message) for each problem."""
    if not isinstance(row, Mapping):
        problems.append(("<row>", f"expected an object with a {messages_key!r} field, got {type(row).__name__}"))
        return [], None, 0
    if messages_key not in row and ("prompt" in row or "completion" in row):
        prompt = _message_list(row, "prompt", problems)
        completion = _message_list(row, "completion", problems)
        messages = prompt + completion
        prompt_length = len(prompt)
        if completion and completion[0].get("role") != "assistant":
            problems.append(("completion[0].role", "the completion must start with an assistant message"))
    else:
        messages = _message_list(row, messages_key, problems)
        roles = [m.get("role") for m in messages]
        prompt_length = roles.index("assistant") if "assistant" in roles else len(messages)
        if prompt_length == 0 and messages:
            problems.append(
                (f"{messages_key}[0].role", "the conversation starts with an assistant message, before any prompt")
            )
    for i, message in enumerate(messages):
        if "weight" in message and (i < prompt_length or message.get("role") != "assistant"):
            problems.append(
                (_where(i, prompt_length, messages_key, row), "only a completion's assistant message has a weight")
            )
    trained = [m for m in messages[prompt_length:] if m.get("role") == "assistant" and m.get("weight", 1) == 1]
    if messages and not trained:
        problems.append(
            (
                messages_key if messages_key in row else "completion",
                "no assistant message of weight 1: nothing to train on",
            )
        )
    tools = row.get(tools_key)
    if tools is not None and (
        isinstance(tools, str | bytes | Mapping)
        or not isinstance(tools, Sequence)
        or not all(isinstance(t, Mapping) for t in tools)
    ):
        problems.append((tools_key, f"expected a list of tool schemas (mappings) or null, got {tools!r}"[:200]))
    return messages, (None if not tools or not isinstance(tools, Sequence) else [dict(t) for t in tools]), prompt_length


def _message_list(row: Mapping[str, Any], key: str, problems: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """The checked messages of ``row[key]`` (a non-empty list)."""
    raw = row.get(key)
    if not isinstance(raw, Sequence) or isinstance(raw, str | bytes) or not raw:
        got = "missing" if key not in row else f"{type(raw).__name__} {raw!r}"[:80]
        problems.append((key, f"expected a non-empty list of chat messages, got {got}"))
        return []
    return [_message(message, f"{key}[{i}]", problems) for i, message in enumerate(raw)]


def _where(index: int, prompt_length: int, messages_key: str, row: Mapping[str, Any]) -> str:
    """The field name of message ``index`` of the row's concatenated messages."""
    if messages_key in row:
        return f"{messages_key}[{index}].weight"
    key, offset = ("prompt", index) if index < prompt_length else ("completion", index - prompt_length)
    return f"{key}[{offset}].weight"


def _message(message: Any, where: str, problems: list[tuple[str, str]]) -> dict[str, Any]:
    """`message` with its tool calls written into its content (`tool_call_text`)."""
    if not isinstance(message, Mapping):
        problems.append((where, f"expected a {{role, content}} mapping, got {type(message).__name__}"))
        return {}
    role = message.get("role")
    if role not in ROLES:
        problems.append((f"{where}.role", f"expected one of {', '.join(ROLES)}, got {role!r}"))
    calls = message.get("tool_calls")
    content = message.get("content")
    if calls is not None and role != "assistant":
        problems.append((f"{where}.tool_calls", f"only an assistant message makes tool calls, not a {role!r} one"))
    if not isinstance(content, str) and not (content is None and role == "assistant" and calls):
        got = "missing" if "content" not in message else type(content).__name__
        problems.append((f"{where}.content", f"expected a string, got {got}"))
    weight = message.get("weight", 1)
    if "weight" in message and (isinstance(weight, bool) or weight not in (0, 1)):
        problems.append((f"{where}.weight", f"expected 0 or 1 (OpenAI's fine-tuning weight), got {weight!r}"))
    out = {k: v for k, v in message.items() if k != "tool_calls"}
    if role == "assistant" and calls is not None:
        blocks = _call_blocks(calls, f"{where}.tool_calls", problems)
        out["content"] = "\n".join([content, *blocks] if content else blocks)
    return out


def _call_blocks(calls: Any, where: str, problems: list[tuple[str, str]]) -> list[str]:
    if isinstance(calls, str | bytes | Mapping) or not isinstance(calls, Sequence):
        problems.append((where, f"expected a list of tool calls, got {type(calls).__name__}"))
        return []
    blocks = []
    for i, call in enumerate(calls):
        function = call.get("function") if isinstance(call, Mapping) else None
        name = function.get("name") if isinstance(function, Mapping) else None
        if not isinstance(name, str) or not name:
            problems.append(
                (
                    f"{where}[{i}].function.name",
                    f"expected a tool call {{function: {{name, arguments}}}}, got {call!r}"[:200],
                )
            )
            continue
        arguments = _arguments(function.get("arguments", {}), f"{where}[{i}].function.arguments", problems)
        if arguments is not None:
            blocks.append(tool_call_text(name, arguments))
    return blocks


def _arguments(value: Any, where: str, problems: list[tuple[str, str]]) -> Mapping[str, Any] | None:
    """A call's arguments as a mapping: an object, or a JSON string of one (OpenAI's form)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            problems.append((where, f"the arguments are not JSON ({exc}): {value!r}"[:200]))
            return None
    if not isinstance(value, Mapping):
        problems.append((where, f"the arguments must be a JSON object, got {type(value).__name__} {value!r}"[:200]))
        return None
    return value
