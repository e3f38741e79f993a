"""The tau-bench agent's opening chat: one system message (role, ``<policy>``, tools, call format), optional
demonstrations, tau2's fixed greeting as the agent's first message, then the user simulator's opening line."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from skyrl_integrations.mcp.prompt import render_tools
from skyrl_integrations.tau_bench.users import GREETING

DEFAULT_ROLE = "You are a customer service agent. Help the user with their request."
CALL_FORMAT = (
    "In each reply, do exactly one of these:\n"
    "- call one tool, replying with only:\n"
    '<tool_call>{"name": "<tool name>", "arguments": {<arguments as JSON>}}</tool_call>\n'
    "  The result comes back in the next message.\n"
    "- or send a message to the user, as plain text without a tool call.\n"
    "Never do both in one reply."
)


def mcp_form(openai_schema: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI function schema as the MCP-form tool (`name`, `description`, `inputSchema`) `render_tools` takes."""
    function = openai_schema["function"]
    return {
        "name": function["name"],
        "description": function.get("description", ""),
        "inputSchema": function["parameters"],
    }


def build_prompt(
    prompt: Sequence[Mapping[str, str]],
    policy: str | None,
    tool_schemas: Sequence[Mapping[str, Any]],
    user_opening: str,
    *,
    style: str = "full",
    demonstrations: Sequence[Mapping[str, str]] = (),
) -> list[dict[str, str]]:
    """The dataset's own system text (or `DEFAULT_ROLE`) heads the system message, then the policy (left out when
    None); the rest of the row's prompt is replaced by the greeting and the user's opening line."""
    head = prompt[0]["content"] if prompt and prompt[0].get("role") == "system" else DEFAULT_ROLE
    tools = render_tools([mcp_form(schema) for schema in tool_schemas], style)
    policy_block = [f"Follow this policy:\n<policy>\n{policy.strip()}\n</policy>"] if policy is not None else []
    system = "\n\n".join([head, *policy_block, tools, CALL_FORMAT])
    return [
        {"role": "system", "content": system},
        *(dict(m) for m in demonstrations),
        {"role": "assistant", "content": GREETING},
        {"role": "user", "content": user_opening},
    ]
