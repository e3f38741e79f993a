"""The public API's contract: result properties, max_calls, accepted tool forms, caller errors, speed on hostile input."""

import json
import time

import pytest

from skyrl_integrations.tool_parser import ParseFailure, ParseResult, ToolCall, ToolRegistry, parse_tool_calls


def tag_call(ticker: str, name: str = "get_stock_price") -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": {"ticker": ticker}}) + "</tool_call>"


def test_failure_values_match_the_contract():
    assert [failure.value for failure in ParseFailure] == [
        "no_call",
        "malformed_json",
        "unknown_tool",
        "invalid_arguments",
    ]


def test_tool_call_is_frozen():
    call = ToolCall("f", {}, "f()")
    with pytest.raises(AttributeError):
        call.name = "g"


@pytest.mark.parametrize(
    ("result", "action", "ok"),
    [
        (ParseResult(calls=[ToolCall("f", {}, "")]), "tool_call", True),
        (ParseResult(failure=ParseFailure.NO_CALL), "respond", True),
        (ParseResult(failure=ParseFailure.MALFORMED, error="bad"), "respond", False),
        (ParseResult(calls=[ToolCall("f", {}, "")], failure=ParseFailure.UNKNOWN_TOOL, error="x"), "tool_call", False),
    ],
    ids=["calls", "plain_reply", "failed_attempt", "calls_with_a_failed_one"],
)
def test_action_and_ok(result, action, ok):
    assert (result.action, result.ok) == (action, ok)


def test_max_calls_keeps_the_first_calls_and_leaves_the_rest_in_the_text():
    message = "\n".join(tag_call(ticker) for ticker in ("AAPL", "MSFT", "NVDA"))
    result = parse_tool_calls(message, max_calls=2)
    assert [call.arguments["ticker"] for call in result.calls] == ["AAPL", "MSFT"]
    assert result.text == tag_call("NVDA")


def test_raw_is_the_matched_block():
    message = "Sure.\n" + tag_call("AAPL") + "\nDone."
    (call,) = parse_tool_calls(message).calls
    assert call.raw == tag_call("AAPL")


@pytest.mark.parametrize(
    "tools",
    [
        [{"name": "get_stock_price", "inputSchema": {"properties": {"ticker": {"type": "string"}}}}],
        [{"type": "function", "function": {"name": "get_stock_price", "parameters": {"properties": {}}}}],
        ToolRegistry.from_tools([{"name": "get_stock_price"}]),
    ],
    ids=["mcp", "openai", "registry"],
)
def test_accepted_tool_forms(tools):
    assert parse_tool_calls(tag_call("AAPL"), tools).calls == [
        ToolCall("get_stock_price", {"ticker": "AAPL"}, tag_call("AAPL"))
    ]


def test_empty_tool_list_makes_every_call_unknown():
    result = parse_tool_calls(tag_call("AAPL"), [])
    assert (result.failure, result.error) == (
        ParseFailure.UNKNOWN_TOOL,
        "unknown tool 'get_stock_price'; available tools: (none)",
    )


def test_unknown_tool_error_lists_the_available_tools():
    result = parse_tool_calls('{"name": "get_weather", "arguments": {}}', [{"name": "a"}, {"name": "b"}])
    assert result.error == "unknown tool 'get_weather'; available tools: a, b"


def test_non_string_text_is_a_caller_error():
    with pytest.raises(TypeError, match="text must be a str, got NoneType"):
        parse_tool_calls(None)


@pytest.mark.parametrize("max_calls", [0, -1, True, 1.5])
def test_bad_max_calls_is_a_caller_error(max_calls):
    with pytest.raises(ValueError, match="max_calls must be a positive int or None"):
        parse_tool_calls("hi", max_calls=max_calls)


def test_many_failures_are_summarised():
    message = "".join(tag_call("AAPL", name=f"nope{i}") for i in range(5))
    result = parse_tool_calls(message, [{"name": "a"}])
    assert result.error.count("unknown tool") == 3
    assert result.error.endswith("; and 2 more failed call(s)")


HOSTILE = {
    "open_tags": "<tool_call>" * 10_000,
    "open_braces": "{" * 100_000,
    "open_brackets": "[" * 100_000,
    "call_keys": '{"name":' * 20_000,
    "deep_then_call": "{" * 50_000 + '{"name": "x", "arguments": {}}' + "}" * 50_000,
    "single_quoted_keys": "{'name': " * 30_000,
    "fences": "```" * 30_000,
    "unclosed_code_calls": "f(\n" * 30_000,
    "known_tool_opens": "get_stock_price(" * 20_000,
    "xml_blocks": '<tool name="x">' * 20_000,
    "xml_parameters": "<tool name='x'>" + "<parameter name='a'>" * 30_000,
    "react_actions": "Action: x\nAction Input: {\n" * 10_000,
    "quotes": '"' * 100_000,
    "triple_quotes": '"""' * 30_000,
    "backslashes": '{"' + "\\" * 100_000,
    "huge_integer": '<tool_call>{"name": "x", "arguments": {"n": ' + "9" * 100_000 + "}}</tool_call>",
    "deep_fenced_json": "```json\n" + '{"name": [' * 10_000,
}


@pytest.mark.parametrize("text", list(HOSTILE.values()), ids=list(HOSTILE))
def test_hostile_input_is_parsed_quickly_without_raising(text):
    tools = [{"name": "get_stock_price", "inputSchema": {"properties": {"ticker": {"type": "string"}}}}]
    started = time.perf_counter()
    for tool_list in (None, tools):
        result = parse_tool_calls(text, tool_list)
        assert isinstance(result, ParseResult)
    # Linear-time scanning takes about a second at most here (10-20k calls); a quadratic path would take minutes.
    assert time.perf_counter() - started < 10.0


def test_throughput_on_typical_messages():
    tools = [{"name": "get_stock_price", "inputSchema": {"properties": {"ticker": {"type": "string"}}}}]
    registry = ToolRegistry.from_tools(tools)
    messages = [
        "The closing price of AAPL on 2024-03-15 was $172.62.",
        "Let me check.\n" + tag_call("AAPL"),
        json.dumps(
            {"tool_calls": [{"function": {"name": "get_stock_price", "arguments": json.dumps({"ticker": "A"})}}]}
        ),
        'Action: get_stock_price\nAction Input: {"ticker": "AAPL"}',
    ] * 250
    started = time.perf_counter()
    for message in messages:
        parse_tool_calls(message, registry)
    rate = len(messages) / (time.perf_counter() - started)
    assert rate > 1_000  # the benchmark measures >10k/s on this CPU; 1k leaves room for a loaded CI box
