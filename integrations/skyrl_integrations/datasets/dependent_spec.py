"""Convert multi-turn "dependent spec" conversations into compact MCP dataset rows.

A dependent-spec conversation is a chat in which later user turns build on earlier tool results::

    system (optional)  "You are a market analyst."
    user               "Find the ticker of Acme Robotics."
    assistant          tool_calls: search_tickers({"query": "Acme Robotics"})
    tool               {"results":[{"ticker":"ACME","name":"Acme Robotics Inc."}]}
    user               "Now get its closing price on 2024-03-15."
    assistant          <tool_call>{"name": "get_stock_price", "arguments": {"ticker": "ACME", ...}}</tool_call>
    tool               {"ticker":"ACME","date":"2024-03-15","close":42.5,...}
    assistant          "42.5"

Each conversation becomes ONE row (``schema.TaskRow``): the system message (or ``--system-prompt``) and a single
user message stating the whole question (one user turn as is; several as a numbered list of steps), the
``tool_sequence`` of every assistant call in order (the server of each tool from ``--tool-map`` or from the
``tools/list`` of ``--servers``), the expected answer from the final assistant message (default) or from the last
tool result (``--answer-from last_tool_result``, with ``--answer-field`` for a JSON result), and the complexity
from the number of steps and servers.

Input files (``.jsonl``: one conversation per line; ``.json``: one conversation or an array of them). A
conversation is ``{"id": "...", "messages": [...], "answer_match": "numeric|exact|contains"}`` (``id`` and
``answer_match`` optional) or a bare list of messages. Messages are ``{"role", "content"}`` with role ``system``
(first only), ``user``, ``assistant`` or ``tool``; assistant calls are OpenAI ``tool_calls``
(``{"type": "function", "function": {"name", "arguments": <JSON string or object>}}``) or any text format
``skyrl_integrations.tool_parser`` reads. Each call must be answered by one ``tool`` message before the next
user or assistant turn.

A bad conversation raises ``ConversationError`` naming the file, line (or array position) and message index;
``--skip-invalid`` drops it instead and counts it.

CLI: ``python -m skyrl_integrations.datasets.dependent_spec INPUT... --output-dir DIR [--servers market,search |
--tool-map map.json] [--answer-from final_message|last_tool_result] [--answer-field close] [--skip-invalid]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyrl_integrations.datasets.io import add_output_arguments, check_output_args, write_from_args
from skyrl_integrations.datasets.replay import ToolServers, answer_from_result
from skyrl_integrations.datasets.schema import ANSWER_MATCHES, TaskRow, ToolStep, is_number
from skyrl_integrations.mcp.prompt import DEFAULT_ROLE
from skyrl_integrations.mcp.servers import BUNDLED_SERVERS
from skyrl_integrations.tool_parser import ParseFailure, parse_tool_calls

__all__ = [
    "ANSWER_SOURCES",
    "ConversationError",
    "ConversionOptions",
    "convert_conversation",
    "convert_files",
    "read_conversations",
]

ANSWER_SOURCES = ("final_message", "last_tool_result")
MULTI_TURN_HEADER = "Complete these steps in order; later steps use the results of earlier ones:"


class ConversationError(ValueError):
    """A conversation that cannot become a dataset row; the message names file, line and message index."""

    def __init__(self, source: str, line: int, message_index: int | None, problem: str):
        self.source, self.line, self.message_index, self.problem = source, line, message_index, problem
        at = f"{source}:{line}" + (f": message {message_index}" if message_index is not None else "")
        super().__init__(f"{at}: {problem}")


@dataclass(frozen=True)
class ConversionOptions:
    """How conversations become rows. ``tool_servers`` maps every tool name to its server; ``tool_schemas`` (MCP
    form), when known, let text calls be checked against the tools' input schemas."""

    tool_servers: Mapping[str, str]
    tool_schemas: Sequence[Mapping[str, Any]] | None = None
    system_prompt: str | None = None
    """Used when a conversation has no system message (``mcp.prompt.DEFAULT_ROLE`` when None). ``MCPToolEnv``
    appends the tools and the call format to it."""
    answer_from: str = "final_message"
    answer_field: str | None = None
    max_tools: int | None = None
    """``limits.max_tools`` of every row; conversations using more distinct tools are rejected. None = the
    schema's default."""
    max_turns: int | None = None
    """``max_turns`` of every row; None = calls + 1."""


@dataclass(frozen=True)
class Conversation:
    source: str
    line: int
    """1-based line of a ``.jsonl`` file, or 1-based position in a ``.json`` array."""
    data: Any


def read_conversations(path: str | Path) -> Iterator[Conversation]:
    """The conversations of one ``.jsonl`` or ``.json`` file, each with its file and line for error messages."""
    path = Path(path)
    source = str(path)
    if not path.is_file():
        raise FileNotFoundError(f"dependent-spec file {source!r} does not exist (or is not a file)")
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConversationError(source, exc.lineno, None, f"invalid JSON: {exc.msg}") from None
        items = data if isinstance(data, list) and not _is_message_list(data) else [data]
        for position, item in enumerate(items, start=1):
            yield Conversation(source, position, item)
        return
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield Conversation(source, number, json.loads(line))
        except json.JSONDecodeError as exc:
            raise ConversationError(source, number, None, f"invalid JSON: {exc.msg}") from None


def convert_conversation(conversation: Conversation, options: ConversionOptions, default_id: str) -> TaskRow:
    """One conversation as a ``TaskRow`` (split/index are assigned when writing); ``ConversationError`` if bad."""

    def fail(problem: str, index: int | None = None) -> ConversationError:
        return ConversationError(conversation.source, conversation.line, index, problem)

    data = conversation.data
    if _is_message_list(data):
        data = {"messages": data}
    if not isinstance(data, Mapping) or not isinstance(data.get("messages"), list) or not data["messages"]:
        raise fail("expected {'messages': [...]} or a list of messages")
    task_id = data.get("id", default_id)
    if not isinstance(task_id, str) or not task_id.strip():
        raise fail(f"'id' must be a non-empty string, got {task_id!r}")
    messages = data["messages"]
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping) or message.get("role") not in ("system", "user", "assistant", "tool"):
            raise fail("expected a message with role system, user, assistant or tool", index)
        if message["role"] == "system" and index != 0:
            raise fail("a system message is only allowed first", index)
    system = messages[0].get("content") if messages[0]["role"] == "system" else None
    body = messages[1:] if system is not None else messages
    offset = len(messages) - len(body)
    if not body or body[0]["role"] != "user":
        raise fail("the conversation must start with a user message (after an optional system message)", offset)

    user_turns: list[str] = []
    steps: list[ToolStep] = []
    pending = 0  # calls of the last assistant message still waiting for their tool message
    last_tool_index = None
    for index, message in enumerate(body, start=offset):
        role = message["role"]
        if role != "tool" and pending:
            raise fail(f"{pending} tool call(s) of the previous assistant message have no tool result", index)
        if role == "user":
            content = _text(message)
            if not content:
                raise fail("empty user message", index)
            user_turns.append(content)
        elif role == "assistant":
            for name, arguments in _assistant_calls(message, options.tool_schemas, fail, index):
                if name not in options.tool_servers:
                    raise fail(f"tool {name!r} is not offered by any configured server ({_known(options)})", index)
                steps.append(ToolStep(len(steps) + 1, options.tool_servers[name], name, arguments))
                pending += 1
        else:
            if not pending:
                raise fail("a tool message that answers no tool call", index)
            pending -= 1
            last_tool_index = index
    if pending:
        raise fail(f"{pending} tool call(s) have no tool result", len(messages) - 1)
    if not steps:
        raise fail("the conversation makes no tool call")
    distinct_tools = len({step.tool for step in steps})
    if options.max_tools is not None and distinct_tools > options.max_tools:
        raise fail(f"{distinct_tools} distinct tools, more than --max-tools {options.max_tools}")

    answer = _expected_answer(messages, options, last_tool_index, fail)
    answer_match = data.get("answer_match") or ("numeric" if is_number(answer) else "contains")
    if answer_match not in ANSWER_MATCHES:
        raise fail(f"'answer_match' must be one of {', '.join(ANSWER_MATCHES)}, got {answer_match!r}")
    if options.max_turns is not None and options.max_turns < len(steps):
        raise fail(f"{len(steps)} tool calls need at least {len(steps)} turns, but --max-turns is {options.max_turns}")
    return TaskRow(
        task_id=task_id,
        system_prompt=system if system is not None else (options.system_prompt or DEFAULT_ROLE),
        user_prompt=merge_user_turns(user_turns),
        tool_sequence=steps,
        expected_answer=answer,
        answer_match=answer_match,
        max_turns=options.max_turns,
        max_tools=options.max_tools,
        extra={"generator": "dependent_spec"},
    )


def merge_user_turns(turns: Sequence[str]) -> str:
    """One user turn as is; several as a numbered list under ``MULTI_TURN_HEADER``."""
    if len(turns) == 1:
        return turns[0]
    return "\n".join([MULTI_TURN_HEADER] + [f"{i}. {turn}" for i, turn in enumerate(turns, start=1)])


def convert_files(
    paths: Sequence[str | Path], options: ConversionOptions, *, skip_invalid: bool = False
) -> tuple[list[TaskRow], Counter[str]]:
    """Rows of every conversation of ``paths`` (ids default to ``<file stem>-<line>``), and the count of skipped
    conversations by problem (empty unless ``skip_invalid``)."""
    rows: list[TaskRow] = []
    skipped: Counter[str] = Counter()
    for path in paths:
        stem = Path(path).stem
        for conversation in read_conversations(path):
            try:
                rows.append(convert_conversation(conversation, options, f"{stem}-{conversation.line:04d}"))
            except ConversationError as exc:
                if not skip_invalid:
                    raise
                print(f"skipped: {exc}", file=sys.stderr)
                skipped[exc.problem] += 1
    return rows, skipped


def _assistant_calls(message: Mapping[str, Any], schemas, fail, index: int) -> list[tuple[str, dict[str, Any]]]:
    tool_calls = message.get("tool_calls")
    if tool_calls:
        if not isinstance(tool_calls, list):
            raise fail("'tool_calls' must be a list", index)
        return [_openai_call(call, fail, index) for call in tool_calls]
    content = _text(message)
    if not content:
        return []
    result = parse_tool_calls(content, list(schemas) if schemas is not None else None)
    if result.failure not in (None, ParseFailure.NO_CALL):
        raise fail(f"unreadable tool call ({result.failure.value}): {result.error}", index)
    return [(call.name, dict(call.arguments)) for call in result.calls]


def _openai_call(call: Any, fail, index: int) -> tuple[str, dict[str, Any]]:
    function = call.get("function") if isinstance(call, Mapping) else None
    name = function.get("name") if isinstance(function, Mapping) else None
    if not isinstance(name, str) or not name:
        raise fail("each tool_calls entry needs function.name", index)
    arguments = function.get("arguments") or {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as exc:
            raise fail(f"tool call {name!r}: arguments are not valid JSON ({exc.msg})", index) from None
    if not isinstance(arguments, Mapping):
        raise fail(f"tool call {name!r}: arguments must be a JSON object", index)
    return name, dict(arguments)


def _expected_answer(messages: list, options: ConversionOptions, last_tool_index: int | None, fail) -> str:
    if options.answer_from == "last_tool_result":
        assert last_tool_index is not None  # every call has a tool result, and there is at least one call
        answer = answer_from_result(_text(messages[last_tool_index]), options.answer_field)
        if answer is None:
            hint = f"has no scalar at {options.answer_field!r}" if options.answer_field else "is not a scalar"
            raise fail(f"the last tool result {hint}; pass --answer-field PATH", last_tool_index)
        return answer
    last = messages[-1]
    if last["role"] != "assistant" or last.get("tool_calls"):
        raise fail("the conversation must end with an assistant answer (no tool call)", len(messages) - 1)
    answer = _text(last)
    if not answer:
        raise fail("the final assistant answer is empty", len(messages) - 1)
    return answer


def _text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    return content.strip() if isinstance(content, str) else ""


def _is_message_list(data: Any) -> bool:
    return isinstance(data, list) and bool(data) and all(isinstance(m, Mapping) and "role" in m for m in data)


def _known(options: ConversionOptions) -> str:
    return ", ".join(sorted(options.tool_servers)) or "none"


def _options_from_args(args: argparse.Namespace) -> tuple[ConversionOptions, ToolServers | None]:
    """Options, plus the ``ToolServers`` to close afterwards (None with ``--tool-map``)."""
    common = {
        "system_prompt": args.system_prompt,
        "answer_from": args.answer_from,
        "answer_field": args.answer_field,
        "max_tools": args.max_tools,
        "max_turns": args.max_turns,
    }
    if args.tool_map:
        try:
            tool_map = json.loads(Path(args.tool_map).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise SystemExit(f"error: --tool-map {args.tool_map}: {exc}") from None
        if not isinstance(tool_map, dict) or not all(isinstance(v, str) for v in tool_map.values()):
            raise SystemExit(f"error: {args.tool_map}: expected a JSON object mapping tool name -> server name")
        return ConversionOptions(tool_servers=tool_map, **common), None
    names = args.servers.split(",") if args.servers else list(BUNDLED_SERVERS)
    servers = ToolServers.bundled(names)
    schemas = [schema for name in names for schema in servers.list_tools(name)]
    return ConversionOptions(tool_servers=servers.tool_servers(), tool_schemas=schemas, **common), servers


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m skyrl_integrations.datasets.dependent_spec", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("inputs", nargs="+", help="dependent-spec .jsonl/.json files")
    add_output_arguments(parser)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--servers", help="bundled servers whose tools/list resolves tool -> server (default: all)")
    where.add_argument("--tool-map", help="JSON file mapping tool name -> server name (no server is started)")
    parser.add_argument("--answer-from", choices=ANSWER_SOURCES, default="final_message")
    parser.add_argument("--answer-field", help="dotted path of the answer in a JSON last tool result, e.g. close")
    parser.add_argument("--system-prompt", help="system message for conversations without one")
    parser.add_argument(
        "--max-tools", type=int, help="limits.max_tools of every row; reject conversations using more distinct tools"
    )
    parser.add_argument("--max-turns", type=int, help="max_turns of every row (default: calls + 1)")
    parser.add_argument(
        "--skip-invalid", action="store_true", help="drop bad conversations (counted) instead of failing"
    )
    args = parser.parse_args(argv)
    try:
        check_output_args(args)
        options, servers = _options_from_args(args)
        try:
            tasks, skipped = convert_files(args.inputs, options, skip_invalid=args.skip_invalid)
        finally:
            if servers is not None:
                servers.close()
        paths = write_from_args(tasks, args)
    except (ValueError, FileNotFoundError) as exc:  # ConversationError, DatasetWriteError, TaskRowError included
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"converted {len(tasks)} conversation(s); skipped {sum(skipped.values())}")
    for problem, count in skipped.most_common():
        print(f"  {count:5d}  {problem}")
    for path in paths.values():
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
