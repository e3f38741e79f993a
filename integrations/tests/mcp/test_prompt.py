"""The MCP env's opening chat: tools section (full / compact), call format, demonstrations."""

from __future__ import annotations

import pytest

from skyrl_integrations.mcp.prompt import DEFAULT_ROLE, build_prompt, call_format, call_text, render_tools

PRICE_TOOL = {
    "name": "get_stock_price",
    "description": "Closing price of a stock.\nData from the exchange.",
    "inputSchema": {
        "type": "object",
        "properties": {"ticker": {"type": "string"}, "date": {"type": "string"}, "days": {"type": ["integer", "null"]}},
        "required": ["ticker"],
    },
}
LIST_TOOL = {"name": "list_tickers", "description": "", "inputSchema": {"type": "object", "properties": {}}}


def test_compact_style_is_one_line_per_tool_with_optional_arguments_marked():
    assert render_tools([PRICE_TOOL, LIST_TOOL], "compact") == (
        "You can call these tools:\n"
        "- get_stock_price(ticker: string, date?: string, days?: integer|null): Closing price of a stock.\n"
        "- list_tickers()"
    )


def test_full_style_is_one_json_schema_per_line_inside_tools_tags():
    assert render_tools([LIST_TOOL], "full") == (
        "You can call these tools:\n<tools>\n"
        '{"name": "list_tickers", "description": "", "parameters": {"type": "object", "properties": {}}}\n</tools>'
    )


def test_an_unknown_style_is_rejected():
    with pytest.raises(ValueError, match=r"tool_prompt: expected one of \('full', 'compact'\), got 'long'"):
        render_tools([LIST_TOOL], "long")


def test_call_format_says_the_call_in_words_with_no_placeholder_to_copy():
    # A template's placeholders (`{<arguments as JSON>}`) were copied verbatim by the untrained 135M model.
    assert call_format(1) == (
        'To call a tool, write one JSON object between <tool_call> and </tool_call>, with the key "name" (one of the '
        'tools above) and the key "arguments" (an object of its arguments).\n'
        "Make one call per reply. The results come back in the next message.\n"
        "When you know the answer, reply without a tool call: that reply is your final answer."
    )


def test_call_text_is_a_call_as_a_reply_writes_it():
    assert call_text("get_company_profile", {"ticker": "CDRW"}) == (
        '<tool_call>{"name": "get_company_profile", "arguments": {"ticker": "CDRW"}}</tool_call>'
    )


def test_call_format_says_how_many_calls_a_reply_may_make():
    assert "You may make up to 3 calls in one reply" in call_format(3)
    assert "Make one call per reply." in call_format(1)


def test_without_a_dataset_system_message_the_default_role_opens_the_prompt():
    messages = build_prompt([{"role": "user", "content": "Price of AAPL?"}], [LIST_TOOL], style="compact")
    assert messages[0]["content"] == "\n\n".join(
        [DEFAULT_ROLE, "You can call these tools:\n- list_tickers()", call_format(1)]
    )
    assert messages[1:] == [{"role": "user", "content": "Price of AAPL?"}]


def test_demonstrations_sit_between_the_system_message_and_the_task():
    demo = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}]
    prompt = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Task"}]
    messages = build_prompt(prompt, [LIST_TOOL], demonstrations=demo)
    assert [m["content"] for m in messages[1:]] == ["Q", "A", "Task"]
    assert messages[0]["content"].startswith("Be brief.\n\nYou can call these tools:")
