"""One row per supported format and per malformed variant: expected calls, format and failure written out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from skyrl_integrations.tool_parser import ParseFailure, parse_tool_calls

MALFORMED = ParseFailure.MALFORMED
NO_CALL = ParseFailure.NO_CALL
UNKNOWN_TOOL = ParseFailure.UNKNOWN_TOOL
INVALID = ParseFailure.INVALID_ARGUMENTS

AAPL = {"ticker": "AAPL"}


@dataclass
class Row:
    id: str
    text: str
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    format: str | None = None
    failure: ParseFailure | None = None
    with_tools: bool = True
    remaining: str | None = None  # expected `text`; None: not checked by this row


ROWS = [
    # --- <tool_call> tags -------------------------------------------------------------------------------------------
    Row(
        "tool_call_tag",
        'Let me check.\n<tool_call>{"name": "get_stock_price", "arguments": {"ticker": "AAPL"}}</tool_call>',
        [("get_stock_price", AAPL)],
        "tool_call_tag",
        remaining="Let me check.",
    ),
    Row(
        "tool_call_tag_unclosed_stop_string_stripped",
        'Checking.\n<tool_call>\n{"name": "get_stock_price", "arguments": {"ticker": "AAPL"}}\n',
        [("get_stock_price", AAPL)],
        "tool_call_tag",
        remaining="Checking.",
    ),
    Row(
        "tool_call_tag_unclosed_then_prose",
        '<tool_call>{"name": "get_stock_price", "arguments": {"ticker": "AAPL"}} I will wait for the price.',
        [("get_stock_price", AAPL)],
        "tool_call_tag",
        remaining="I will wait for the price.",
    ),
    Row(
        "tool_call_tag_unclosed_before_special_token",
        '<tool_call>{"name": "get_stock_price", "arguments": {"ticker": "AAPL"}}<|im_end|>',
        [("get_stock_price", AAPL)],
        "tool_call_tag",
    ),
    Row(
        "tool_call_tag_two_blocks",
        '<tool_call>{"name": "get_stock_price", "arguments": {"ticker": "AAPL"}}</tool_call>\n'
        '<tool_call>{"name": "web_search", "arguments": {"query": "AAPL news"}}</tool_call>',
        [("get_stock_price", AAPL), ("web_search", {"query": "AAPL news"})],
        "tool_call_tag",
    ),
    Row(
        "tool_call_tag_two_unclosed_blocks",
        '<tool_call>{"name": "get_stock_price", "arguments": {"ticker": "AAPL"}}\n'
        '<tool_call>{"name": "get_stock_price", "arguments": {"ticker": "MSFT"}}',
        [("get_stock_price", AAPL), ("get_stock_price", {"ticker": "MSFT"})],
        "tool_call_tag",
    ),
    Row(
        "tool_call_tag_two_objects_in_one_block",
        '<tool_call>\n{"name": "get_stock_price", "arguments": {"ticker": "AAPL"}}\n'
        '{"name": "list_channels", "arguments": {}}\n</tool_call>',
        [("get_stock_price", AAPL), ("list_channels", {})],
        "tool_call_tag",
    ),
    Row(
        "tool_call_tag_list_of_calls",
        '<tool_call>[{"name": "list_channels"}, {"name": "get_stock_price", "arguments": {"ticker": "AAPL"}}]</tool_call>',
        [("list_channels", {}), ("get_stock_price", AAPL)],
        "tool_call_tag",
    ),
    Row(
        "tool_call_tag_tool_and_params_keys",
        '<tool_call>{"tool": "get_stock_price", "params": {"ticker": "AAPL"}}</tool_call>',
        [("get_stock_price", AAPL)],
        "tool_call_tag",
    ),
    Row(
        "tool_call_tag_function_key",
        '<tool_call>{"function": "get_stock_price", "parameters": {"ticker": "AAPL"}}</tool_call>',
        [("get_stock_price", AAPL)],
        "tool_call_tag",
    ),
    Row(
        "tool_call_tag_string_arguments",
        '<tool_call>{"name": "get_stock_price", "arguments": "{\\"ticker\\": \\"AAPL\\"}"}</tool_call>',
        [("get_stock_price", AAPL)],
        "tool_call_tag",
    ),
    Row(
        "tool_call_tag_fenced_inside",
        '<tool_call>\n```json\n{"name": "get_stock_price", "arguments": {"ticker": "AAPL"}}\n```\n</tool_call>',
        [("get_stock_price", AAPL)],
        "tool_call_tag",
    ),
    Row(
        "tool_call_tag_code_call_inside",
        '<tool_call>get_stock_price(ticker="AAPL")</tool_call>',
        [("get_stock_price", AAPL)],
        "tool_call_tag",
    ),
    Row(
        "tool_call_tag_qwen3_coder_xml_inside",
        "<tool_call>\n<function=web_search>\n<parameter=query>\nfed rates\n</parameter>\n"
        "<parameter=max_results>\n3\n</parameter>\n</function>\n</tool_call>",
        [("web_search", {"query": "fed rates", "max_results": 3})],
        "tool_call_tag",
    ),
    Row(
        "tool_call_tag_repaired_python_literals_and_trailing_commas",
        "<tool_call>{'name': 'web_search', 'arguments': {'query': 'x', 'safe': True,},}</tool_call>",
        [("web_search", {"query": "x", "safe": True})],
        "tool_call_tag",
    ),
    Row(
        "tool_call_tag_repaired_missing_final_braces",
        '<tool_call>{"name": "get_stock_price", "arguments": {"ticker": "AAPL"</tool_call>',
        [("get_stock_price", AAPL)],
        "tool_call_tag",
    ),
    Row(
        "tool_call_tag_repaired_truncated_string",
        '<tool_call>{"name": "get_stock_price", "arguments": {"ticker": "AAPL',
        [("get_stock_price", AAPL)],
        "tool_call_tag",
    ),
    Row(
        "tool_call_tag_malformed_unquoted_value",
        '<tool_call>{"name": "get_stock_price", "arguments": {"ticker": AAPL}}</tool_call>',
        failure=MALFORMED,
        format="tool_call_tag",
    ),
    Row("tool_call_tag_malformed_empty", "<tool_call></tool_call>", failure=MALFORMED, format="tool_call_tag"),
    Row(
        "tool_call_tag_malformed_open_tag_only",
        "Let me call it.\n<tool_call>",
        failure=MALFORMED,
        format="tool_call_tag",
    ),
    Row(
        "tool_call_tag_malformed_no_name",
        '<tool_call>{"ticker": "AAPL"}</tool_call>',
        failure=MALFORMED,
        format="tool_call_tag",
    ),
    Row(
        "tool_call_tag_malformed_huge_integer",
        '<tool_call>{"name": "web_search", "arguments": {"query": "x", "max_results": ' + "9" * 5000 + "}}</tool_call>",
        failure=MALFORMED,
        format="tool_call_tag",
    ),
    Row(
        "tool_call_tag_malformed_string_arguments",
        '<tool_call>{"name": "get_stock_price", "arguments": "{ticker: AAPL"}</tool_call>',
        failure=MALFORMED,
        format="tool_call_tag",
    ),
    Row(
        "tool_call_tag_malformed_non_string_name",
        '<tool_call>{"name": 42, "arguments": {}}</tool_call>',
        failure=MALFORMED,
        format="tool_call_tag",
    ),
    Row(
        "tool_call_tag_unknown_tool",
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
        failure=UNKNOWN_TOOL,
        format="tool_call_tag",
    ),
    Row(
        "tool_call_tag_missing_required_argument",
        '<tool_call>{"name": "get_stock_price", "arguments": {"date": "2024-03-15"}}</tool_call>',
        failure=INVALID,
        format="tool_call_tag",
    ),
    Row(
        "tool_call_tag_arguments_not_an_object",
        '<tool_call>{"name": "get_stock_price", "arguments": ["AAPL"]}</tool_call>',
        failure=INVALID,
        format="tool_call_tag",
    ),
    Row(
        "tool_call_tag_one_valid_one_unknown",
        '<tool_call>{"name": "get_stock_price", "arguments": {"ticker": "AAPL"}}</tool_call>'
        '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>',
        [("get_stock_price", AAPL)],
        "tool_call_tag",
        UNKNOWN_TOOL,
    ),
    # --- <function_call> tags ---------------------------------------------------------------------------------------
    Row(
        "function_call_tag",
        '<function_call>{"name": "get_stock_price", "arguments": {"ticker": "AAPL"}}</function_call>',
        [("get_stock_price", AAPL)],
        "function_call_tag",
    ),
    Row(
        "function_call_tag_unclosed",
        '<function_call>{"name": "get_stock_price", "arguments": {"ticker": "AAPL"}}',
        [("get_stock_price", AAPL)],
        "function_call_tag",
    ),
    Row(
        "function_call_tag_malformed",
        '<function_call>{"name": "get_stock_price" "arguments": {"ticker": "AAPL"}}</function_call>',
        failure=MALFORMED,
        format="function_call_tag",
    ),
    # --- OpenAI tool_calls ------------------------------------------------------------------------------------------
    Row(
        "openai_tool_calls_string_arguments",
        '{"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", '
        '"function": {"name": "get_stock_price", "arguments": "{\\"ticker\\": \\"AAPL\\"}"}}]}',
        [("get_stock_price", AAPL)],
        "openai_tool_calls",
    ),
    Row(
        "openai_tool_calls_object_arguments_two_calls",
        '{"tool_calls": [{"type": "function", "function": {"name": "get_stock_price", "arguments": {"ticker": "AAPL"}}},'
        ' {"type": "function", "function": {"name": "list_channels", "arguments": "{}"}}]}',
        [("get_stock_price", AAPL), ("list_channels", {})],
        "openai_tool_calls",
    ),
    Row(
        "openai_legacy_function_call",
        '{"function_call": {"name": "get_stock_price", "arguments": "{\\"ticker\\": \\"AAPL\\"}"}}',
        [("get_stock_price", AAPL)],
        "openai_tool_calls",
    ),
    Row(
        "openai_tool_calls_malformed_string_arguments",
        '{"tool_calls": [{"type": "function", "function": {"name": "get_stock_price", "arguments": "{\\"ticker\\": "}}]}',
        failure=MALFORMED,
        format="openai_tool_calls",
    ),
    Row(
        "openai_tool_calls_item_without_function",
        '{"tool_calls": [{"id": "call_1", "type": "function"}]}',
        failure=MALFORMED,
        format="openai_tool_calls",
    ),
    # --- bare JSON --------------------------------------------------------------------------------------------------
    Row(
        "json_bare_object_with_prose",
        'I will look it up. {"name": "get_stock_price", "arguments": {"ticker": "AAPL"}} Then I will answer.',
        [("get_stock_price", AAPL)],
        "json",
        remaining="I will look it up. Then I will answer.",
    ),
    Row(
        "json_list_of_calls",
        '[{"name": "get_stock_price", "arguments": {"ticker": "AAPL"}}, {"name": "list_channels", "arguments": {}}]',
        [("get_stock_price", AAPL), ("list_channels", {})],
        "json",
    ),
    Row(
        "json_two_objects_in_prose",
        'First {"name": "get_stock_price", "arguments": {"ticker": "AAPL"}} and then '
        '{"name": "get_stock_price", "arguments": {"ticker": "MSFT"}}',
        [("get_stock_price", AAPL), ("get_stock_price", {"ticker": "MSFT"})],
        "json",
        remaining="First and then",
    ),
    Row(
        "json_openai_item_shape",
        '{"type": "function", "function": {"name": "get_stock_price", "arguments": {"ticker": "AAPL"}}}',
        [("get_stock_price", AAPL)],
        "json",
    ),
    Row(
        "json_missing_final_brace_at_end",
        'Calling: {"name": "get_stock_price", "arguments": {"ticker": "AAPL"}',
        [("get_stock_price", AAPL)],
        "json",
    ),
    Row(
        "json_after_unbalanced_bracket_in_prose",
        'Prices [see below:\n{"name": "get_stock_price", "arguments": {"ticker": "AAPL"}}',
        [("get_stock_price", AAPL)],
        "json",
    ),
    Row(
        "json_malformed",
        'Calling {"name": "get_stock_price", "arguments": {"ticker": }} now.',
        failure=MALFORMED,
        format="json",
    ),
    Row("json_data_is_not_a_call", 'The profile is {"name": "Apple Inc.", "ticker": "AAPL"}.', failure=NO_CALL),
    Row(
        "json_name_only_objects_are_data_without_tools",
        'The team: [{"name": "Alice"}, {"name": "Bob"}]',
        failure=NO_CALL,
        with_tools=False,
    ),
    Row(
        "json_name_only_object_naming_a_known_tool_is_a_call",
        'Listing them: {"name": "list_channels"}',
        [("list_channels", {})],
        "json",
    ),
    Row(
        "json_unknown_tool",
        '{"name": "get_weather", "arguments": {"city": "Paris"}}',
        failure=UNKNOWN_TOOL,
        format="json",
    ),
    # --- ``` fenced JSON --------------------------------------------------------------------------------------------
    Row(
        "fenced_json",
        'Here is the call:\n```json\n{"name": "get_stock_price", "arguments": {"ticker": "AAPL"}}\n```',
        [("get_stock_price", AAPL)],
        "fenced_json",
        remaining="Here is the call:",
    ),
    Row(
        "fenced_json_no_language",
        '```\n{"name": "get_stock_price", "arguments": {"ticker": "AAPL"}}\n```',
        [("get_stock_price", AAPL)],
        "fenced_json",
    ),
    Row(
        "fenced_json_unclosed",
        '```json\n{"name": "get_stock_price", "arguments": {"ticker": "AAPL"}}\n',
        [("get_stock_price", AAPL)],
        "fenced_json",
    ),
    Row(
        "fenced_json_openai_tool_calls_inside",
        '```json\n{"tool_calls": [{"function": {"name": "get_stock_price", "arguments": "{\\"ticker\\": \\"AAPL\\"}"}}]}\n```',
        [("get_stock_price", AAPL)],
        "fenced_json",
    ),
    Row(
        "fenced_json_malformed",
        '```json\n{"name": "get_stock_price", "arguments": {"ticker": "AAPL"}, oops}\n```',
        failure=MALFORMED,
        format="fenced_json",
    ),
    Row("fenced_json_name_only_is_data", '```json\n{"name": "Alice"}\n```', failure=NO_CALL, with_tools=False),
    Row("fenced_json_data_is_not_a_call", '```json\n{"price": 172.62, "currency": "USD"}\n```', failure=NO_CALL),
    # --- XML --------------------------------------------------------------------------------------------------------
    Row(
        "xml_name_attribute_json_body",
        '<tool name="get_stock_price">{"ticker": "AAPL"}</tool>',
        [("get_stock_price", AAPL)],
        "xml",
    ),
    Row(
        "xml_name_attribute_child_elements_coerced",
        "<tool name='web_search'><query>fed &amp; rates</query><max_results>5</max_results><safe>true</safe></tool>",
        [("web_search", {"query": "fed & rates", "max_results": 5, "safe": True})],
        "xml",
    ),
    Row(
        "xml_name_element_arguments_element",
        '<tool>\n  <name>get_stock_price</name>\n  <arguments>{"ticker": "AAPL"}</arguments>\n</tool>',
        [("get_stock_price", AAPL)],
        "xml",
    ),
    Row(
        "xml_name_element_nested_argument_elements",
        "<tool><name>get_stock_price</name><arguments><ticker>AAPL</ticker></arguments></tool>",
        [("get_stock_price", AAPL)],
        "xml",
    ),
    Row(
        "xml_invoke_parameters",
        '<invoke name="send_message"><parameter name="channel">#general</parameter>'
        '<parameter name="text">Deploy done</parameter></invoke>',
        [("send_message", {"channel": "#general", "text": "Deploy done"})],
        "xml",
    ),
    Row(
        "xml_unclosed_block",
        '<tool name="get_stock_price"><ticker>AAPL</ticker>',
        [("get_stock_price", AAPL)],
        "xml",
    ),
    Row(
        "xml_two_blocks",
        '<tool name="get_stock_price"><ticker>AAPL</ticker></tool>\n<tool name="list_channels"/>',
        [("get_stock_price", AAPL), ("list_channels", {})],
        "xml",
    ),
    Row(
        "xml_malformed_json_body",
        '<tool name="get_stock_price">{"ticker": }</tool>',
        failure=MALFORMED,
        format="xml",
    ),
    Row(
        "xml_malformed_free_text_body",
        '<tool name="get_stock_price">the price of Apple please</tool>',
        failure=MALFORMED,
        format="xml",
    ),
    Row(
        "xml_invalid_argument_type",
        "<tool name='web_search'><query>x</query><max_results>many</max_results></tool>",
        failure=INVALID,
        format="xml",
    ),
    Row("xml_prose_about_a_tool_element", "Wrap it in a <tool> element.", failure=NO_CALL),
    # --- ReAct ------------------------------------------------------------------------------------------------------
    Row(
        "react_json_input",
        'Thought: I need the price.\nAction: get_stock_price\nAction Input: {"ticker": "AAPL"}\nObservation:',
        [("get_stock_price", AAPL)],
        "react",
        remaining="Thought: I need the price.\n\nObservation:",
    ),
    Row(
        "react_plain_input_single_required_property",
        "Action: web_search\nAction Input: fed rate decision",
        [("web_search", {"query": "fed rate decision"})],
        "react",
    ),
    Row(
        "react_two_actions",
        'Action: get_stock_price\nAction Input: {"ticker": "AAPL"}\n'
        'Action: get_stock_price\nAction Input: {"ticker": "MSFT"}',
        [("get_stock_price", AAPL), ("get_stock_price", {"ticker": "MSFT"})],
        "react",
    ),
    Row(
        "react_markdown_bold_and_fenced_input",
        '**Action:** `get_stock_price`\n**Action Input:**\n```json\n{"ticker": "AAPL"}\n```',
        [("get_stock_price", AAPL)],
        "react",
    ),
    Row(
        "react_malformed_json_input",
        'Action: get_stock_price\nAction Input: {"ticker": AAPL}',
        failure=MALFORMED,
        format="react",
    ),
    Row(
        "react_plain_input_without_schema",
        "Action: web_search\nAction Input: fed rate decision",
        failure=MALFORMED,
        format="react",
        with_tools=False,
    ),
    Row(
        "react_final_answer_is_not_a_call",
        "Thought: done.\nAction: Final Answer\nAction Input: 172.62",
        failure=NO_CALL,
    ),
    Row("react_action_without_input_is_prose", "Action: none needed, the answer is 42.", failure=NO_CALL),
    # --- code-call syntax -------------------------------------------------------------------------------------------
    Row(
        "code_call_python_block_without_tools",
        'I will call:\n```python\nget_stock_price(ticker="AAPL", date="2024-03-15")\n```',
        [("get_stock_price", {"ticker": "AAPL", "date": "2024-03-15"})],
        "code_call",
        with_tools=False,
        remaining="I will call:",
    ),
    Row(
        "code_call_own_line_json_literals",
        "web_search(query='fed', safe=true, filters=['news', 'gov'])",
        [("web_search", {"query": "fed", "safe": True, "filters": ["news", "gov"]})],
        "code_call",
    ),
    Row(
        "code_call_inline_known_tool",
        'I will run get_stock_price(ticker="AAPL") now.',
        [("get_stock_price", AAPL)],
        "code_call",
        remaining="I will run now.",
    ),
    Row(
        "code_call_tool_code_print_namespaced",
        '```tool_code\nprint(default_api.get_stock_price(ticker="AAPL"))\n```',
        [("get_stock_price", AAPL)],
        "code_call",
    ),
    Row(
        "code_call_positional_mapped_by_schema",
        'get_stock_price("AAPL", "2024-03-15")',
        [("get_stock_price", {"ticker": "AAPL", "date": "2024-03-15"})],
        "code_call",
    ),
    Row(
        "code_call_two_lines",
        'get_stock_price(ticker="AAPL")\nget_stock_price(ticker="MSFT")',
        [("get_stock_price", AAPL), ("get_stock_price", {"ticker": "MSFT"})],
        "code_call",
    ),
    Row(
        "code_call_multiline_arguments",
        '```python\nsend_message(\n    channel="#general",\n    text="Deploy done",\n)\n```',
        [("send_message", {"channel": "#general", "text": "Deploy done"})],
        "code_call",
    ),
    Row(
        "code_call_at_message_start_with_print_at_the_end",
        'get_stock_price(ticker="AAPL")) then print(',
        [("get_stock_price", AAPL)],
        "code_call",
        remaining=") then print(",
    ),
    Row(
        "code_call_non_literal_argument",
        "get_stock_price(ticker=lookup('Apple'))",
        failure=MALFORMED,
        format="code_call",
    ),
    Row("code_call_unclosed_parenthesis", 'get_stock_price(ticker="AAPL"', failure=MALFORMED, format="code_call"),
    Row("code_call_prose_parenthesis_is_not_a_call", "You can call me (maybe) tomorrow.", failure=NO_CALL),
    Row("code_call_prose_mention_without_arguments", "I used get_stock_price() to find it.", failure=NO_CALL),
    Row(
        "code_call_sample_code_without_tools",
        "```python\ndef main():\n    print('hi')\n\nmain()\n```",
        failure=NO_CALL,
        with_tools=False,
    ),
    Row("code_call_unknown_function_with_tools", 'print("hello")', failure=NO_CALL),
    # --- argument repairs and schema checks -------------------------------------------------------------------------
    Row(
        "alias_python_code_to_code",
        '<tool_call>{"name": "execute_python", "arguments": {"python_code": "print(1)"}}</tool_call>',
        [("execute_python", {"code": "print(1)"})],
        "tool_call_tag",
    ),
    Row(
        "alias_q_to_query_and_numeric_string",
        '<tool_call>{"name": "web_search", "arguments": {"q": "fed", "max_results": "5"}}</tool_call>',
        [("web_search", {"query": "fed", "max_results": 5})],
        "tool_call_tag",
    ),
    Row(
        "tool_name_case_and_namespace_forgiven",
        '<tool_call>{"name": "functions.Get-Stock-Price", "arguments": {"ticker": "AAPL"}}</tool_call>',
        [("get_stock_price", AAPL)],
        "tool_call_tag",
    ),
    Row(
        "unknown_argument_rejected_when_schema_closed",
        '<tool_call>{"name": "execute_python", "arguments": {"code": "1", "timeout": 5}}</tool_call>',
        failure=INVALID,
        format="tool_call_tag",
    ),
    Row(
        "enum_violation",
        '<tool_call>{"name": "send_message", "arguments": {"channel": "c", "text": "t", "priority": "urgent"}}'
        "</tool_call>",
        failure=INVALID,
        format="tool_call_tag",
    ),
    Row(
        "null_optional_argument_dropped",
        '<tool_call>{"name": "web_search", "arguments": {"query": "x", "max_results": null}}</tool_call>',
        [("web_search", {"query": "x"})],
        "tool_call_tag",
    ),
    Row(
        "without_tools_any_well_formed_name_is_accepted",
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
        [("get_weather", {"city": "Paris"})],
        "tool_call_tag",
        with_tools=False,
    ),
    Row(
        "without_tools_invalid_name_is_malformed",
        '<tool_call>{"name": "get the weather", "arguments": {}}</tool_call>',
        failure=MALFORMED,
        format="tool_call_tag",
        with_tools=False,
    ),
    # --- precedence -------------------------------------------------------------------------------------------------
    Row(
        "precedence_tag_before_bare_json",
        'Example: {"name": "list_channels", "arguments": {}}\n'
        '<tool_call>{"name": "get_stock_price", "arguments": {"ticker": "AAPL"}}</tool_call>',
        [("get_stock_price", AAPL)],
        "tool_call_tag",
    ),
    Row(
        "precedence_valid_later_format_beats_failed_earlier_one",
        '<tool_call>{"name": oops}</tool_call>\nAction: get_stock_price\nAction Input: {"ticker": "AAPL"}',
        [("get_stock_price", AAPL)],
        "react",
    ),
    # --- no call at all ---------------------------------------------------------------------------------------------
    Row("natural_language", "The closing price of AAPL on 2024-03-15 was $172.62.", failure=NO_CALL),
    Row("empty_message", "", failure=NO_CALL, remaining=""),
    Row("whitespace_message", "  \n\t ", failure=NO_CALL, remaining=""),
]


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_format_table(row: Row, tools):
    result = parse_tool_calls(row.text, tools if row.with_tools else None)
    assert [(call.name, call.arguments) for call in result.calls] == row.calls
    assert result.format == row.format
    assert result.failure == row.failure
    assert result.action == ("tool_call" if row.calls else "respond")
    if row.failure not in (None, NO_CALL):
        assert result.error  # a failed attempt always explains itself
    if row.remaining is not None:
        assert result.text == row.remaining
