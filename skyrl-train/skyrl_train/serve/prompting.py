"""Chat messages and tool definitions -> prompt token ids, through the tokenizer's chat template.

Tools are rendered by the chat template (`apply_chat_template(messages, tools=tools, add_generation_prompt=True)`)
when the template uses them. Many small models' templates (SmolLM2-135M-Instruct's among them) ignore `tools`;
then the tool definitions are appended to the system message as a `<tools>` block with instructions to answer
with `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (a new system message is inserted when there is
none), and earlier assistant `tool_calls` are written into their message text in that same form, so the model
sees its own past calls. `ChatRenderer.tool_mode` says which applies; the server logs it at startup.

Request text is text: a special token's string in a message or a tool definition (`<|im_end|>`, `<|im_start|>`) is
tokenised as plain text (transformers' `sanitize_control_tokens`), so a client cannot forge turns or a system prompt;
only the chat template writes special tokens. Messages that held one are counted (`special_token_messages`) and
logged, without their text. A mapping key holding one (a tool-call argument or schema property name, which that
sanitizing leaves alone) gets the request refused with 400.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Literal

from skyrl_train.generators.utils import SpecialTokenCounter

logger = logging.getLogger(__name__)

_PROBE_TOOL_NAME = "skyrl_probe_tool_3f9a"
_PROBE_TOOL = {
    "type": "function",
    "function": {"name": _PROBE_TOOL_NAME, "description": "probe", "parameters": {"type": "object", "properties": {}}},
}

TOOLS_BLOCK_HEADER = (
    "# Tools\n\n" "You can call the tools described by the JSON schemas inside <tools></tools>:\n<tools>\n"
)
TOOLS_BLOCK_FOOTER = (
    "\n</tools>\n\n"
    "To call a tool, reply with one JSON object per call inside <tool_call></tool_call> tags:\n"
    '<tool_call>\n{"name": "<tool name>", "arguments": {<arguments as JSON>}}\n</tool_call>'
)


class ChatTemplateError(ValueError):
    """The tokenizer has no chat template, or the template rejected the conversation."""


class ChatRenderer:
    """Renders OpenAI-style chat requests into prompt token ids with `tokenizer`'s chat template."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.has_template = bool(getattr(tokenizer, "chat_template", None))
        self._special_tokens = SpecialTokenCounter(tokenizer)
        self.special_token_messages = 0
        """Messages rendered so far that held a special token's string (tokenised as text)."""
        self.tool_mode: Literal["chat_template", "system_message", "unavailable"] = "unavailable"
        if self.has_template:
            self.tool_mode = "chat_template" if _template_renders_tools(tokenizer) else "system_message"

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
        """Prompt token ids (with the assistant generation prompt) of `messages` (OpenAI message dicts) and
        `tools` (OpenAI `{"type": "function", "function": {...}}` dicts)."""
        if not self.has_template:
            raise ChatTemplateError("this model's tokenizer has no chat template; use /v1/completions instead")
        messages = [_template_message(m) for m in messages]
        if self._special_tokens.in_keys(messages) or self._special_tokens.in_keys(tools):
            raise ChatTemplateError(
                "a key in the messages or tools (a tool-call argument or schema property name) holds a special "
                "token's string; keys cannot be tokenised as text, so the request is refused"
            )
        flagged = self._special_tokens.count(messages)
        if flagged:
            self.special_token_messages += flagged
            logger.warning("%d message(s) of a chat request held special-token strings; tokenised as text", flagged)
        if tools and self.tool_mode == "system_message":
            messages = _with_tools_in_system_message(messages, tools)
            tools = None
        try:
            encoded = self.tokenizer.apply_chat_template(
                messages,
                tools=tools or None,
                add_generation_prompt=True,
                tokenize=True,
                return_dict=True,
                sanitize_control_tokens=True,
            )
        except Exception as error:  # jinja raises TemplateError, TypeError, ... on conversations it can't render
            raise ChatTemplateError(f"the chat template could not render the messages: {error}") from error
        return list(encoded["input_ids"])


def render_tools_block(tools: list[dict[str, Any]]) -> str:
    """The `<tools>` block appended to the system message when the chat template ignores tools."""
    return TOOLS_BLOCK_HEADER + "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools) + TOOLS_BLOCK_FOOTER


def _template_renders_tools(tokenizer) -> bool:
    """Whether the chat template puts tool definitions into the prompt (a probe tool's name shows up)."""
    probe = [{"role": "user", "content": "hi"}]
    try:
        text = tokenizer.apply_chat_template(probe, tools=[_PROBE_TOOL], add_generation_prompt=True, tokenize=False)
    except Exception:  # a template that fails with tools certainly does not render them
        return False
    return _PROBE_TOOL_NAME in text


def _template_message(message: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI message as chat templates expect it: text content as one string, `developer` as `system`,
    tool-call arguments as objects (OpenAI sends them as JSON strings)."""
    message = {k: v for k, v in message.items() if v is not None}
    content = message.get("content", "")
    if isinstance(content, list):
        content = "\n".join(part["text"] for part in content)
    message["content"] = content
    if message["role"] == "developer":
        message["role"] = "system"
    if message.get("tool_calls"):
        message["tool_calls"] = [_decoded_arguments(call) for call in message["tool_calls"]]
    return message


def _decoded_arguments(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("arguments"), str):
        return call
    try:
        arguments = json.loads(function["arguments"])
    except json.JSONDecodeError:
        return call
    return {**call, "function": {**function, "arguments": arguments}}


def _with_tools_in_system_message(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    block = render_tools_block(tools)
    messages = [_calls_as_text(m) for m in messages]
    if messages and messages[0]["role"] == "system":
        first = messages[0]
        return [{**first, "content": f"{first['content']}\n\n{block}" if first["content"] else block}, *messages[1:]]
    return [{"role": "system", "content": block}, *messages]


def _calls_as_text(message: dict[str, Any]) -> dict[str, Any]:
    """An assistant message's `tool_calls` written into its content as `<tool_call>` blocks."""
    calls = message.get("tool_calls")
    if not calls:
        return message
    blocks = []
    for call in calls:
        function = call.get("function") if isinstance(call.get("function"), dict) else {}
        payload = {"name": function.get("name"), "arguments": function.get("arguments", {})}
        blocks.append(f"<tool_call>\n{json.dumps(payload, ensure_ascii=False)}\n</tool_call>")
    text = "\n".join(filter(None, [message["content"], *blocks]))
    return {k: v for k, v in message.items() if k != "tool_calls"} | {"content": text}
