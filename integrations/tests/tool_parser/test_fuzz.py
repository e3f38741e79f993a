"""Property-based tests: the parser never raises, reads back every format it supports, and leaves prose alone."""

from __future__ import annotations

import html
import json
import keyword

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skyrl_integrations.tool_parser import ParseFailure, parse_tool_calls
from skyrl_integrations.tool_parser.parser import INTERNAL_ERROR

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

TOOLS = [
    {
        "name": "get_stock_price",
        "inputSchema": {
            "type": "object",
            "properties": {"ticker": {"type": "string"}, "date": {"type": "string"}},
            "required": ["ticker"],
        },
    },
    {"name": "list_channels", "inputSchema": {"type": "object", "properties": {}}},
]

# Fragments of every format, so random mixes reach deep into each extractor.
_FRAGMENTS = [
    "<tool_call>",
    "</tool_call>",
    "<function_call>",
    "</function_call>",
    "```",
    "```json\n",
    "```python\n",
    '{"name": "get_stock_price", "arguments": {"ticker": "AAPL"}}',
    '{"name": ',
    '"arguments": ',
    '{"tool_calls": [',
    '{"function": {',
    "{",
    "}",
    "[",
    "]",
    '"',
    "'",
    "\\",
    ",",
    ":",
    "<tool name='get_stock_price'>",
    "</tool>",
    "<tool>",
    "<name>",
    "</name>",
    "<invoke name=",
    "<parameter name='ticker'>",
    "</parameter>",
    "<function=get_stock_price>",
    "<|im_end|>",
    "Action: get_stock_price\n",
    "Action Input: ",
    "Observation:",
    "Final Answer:",
    "get_stock_price(",
    "ticker='AAPL'",
    "print(",
    "(",
    ")",
    "True",
    "null",
    "9" * 40,
    "\n",
    " ",
]
_NOISE = st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.text(max_size=8)), max_size=40).map("".join)

# No "<" or "`" in generated strings: a value that embeds another format's markers is a different, ambiguous message.
_SAFE_TEXT = st.text(alphabet=st.characters(blacklist_characters="<`", blacklist_categories=("Cs",)), max_size=20)
_JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63),
    st.floats(allow_nan=False, allow_infinity=False),
    _SAFE_TEXT,
)
_JSON_VALUES = st.recursive(
    _JSON_SCALARS,
    lambda children: st.one_of(st.lists(children, max_size=3), st.dictionaries(_SAFE_TEXT, children, max_size=3)),
    max_leaves=8,
)
_IDENTIFIER = st.from_regex(r"[a-z][a-z0-9_]{0,15}", fullmatch=True).filter(
    lambda name: not keyword.iskeyword(name) and name not in ("print", "final_answer", "finalanswer")
)


def _check_invariants(result, max_calls=None):
    assert result.error != INTERNAL_ERROR
    assert result.action == ("tool_call" if result.calls else "respond")
    assert (result.failure is None) == (result.error is None) or result.failure is ParseFailure.NO_CALL
    if max_calls is not None:
        assert len(result.calls) <= max_calls
    if result.failure is ParseFailure.NO_CALL:
        assert result.calls == [] and result.format is None


@FUZZ
@given(text=st.text())
def test_never_raises_on_arbitrary_unicode(text):
    _check_invariants(parse_tool_calls(text))
    _check_invariants(parse_tool_calls(text, TOOLS))


@FUZZ
@given(text=_NOISE, max_calls=st.one_of(st.none(), st.integers(min_value=1, max_value=3)))
def test_never_raises_on_mixed_format_fragments(text, max_calls):
    _check_invariants(parse_tool_calls(text, max_calls=max_calls), max_calls)
    _check_invariants(parse_tool_calls(text, TOOLS, max_calls=max_calls), max_calls)


def _python_kwargs(arguments):
    return ", ".join(f"{key}={value!r}" for key, value in arguments.items())


RENDERERS = {
    "tool_call_tag": lambda n, a: (
        "tool_call_tag",
        f"<tool_call>{json.dumps({'name': n, 'arguments': a})}</tool_call>",
    ),
    "tool_call_tag_unclosed": lambda n, a: (
        "tool_call_tag",
        f"Let me check.\n<tool_call>\n{json.dumps({'name': n, 'arguments': a}, indent=2)}\n",
    ),
    "function_call_tag": lambda n, a: (
        "function_call_tag",
        f"<function_call>{json.dumps({'tool': n, 'params': a})}</function_call>",
    ),
    "openai_string_arguments": lambda n, a: (
        "openai_tool_calls",
        json.dumps({"tool_calls": [{"type": "function", "function": {"name": n, "arguments": json.dumps(a)}}]}),
    ),
    "openai_object_arguments": lambda n, a: (
        "openai_tool_calls",
        json.dumps({"tool_calls": [{"type": "function", "function": {"name": n, "arguments": a}}]}),
    ),
    "json": lambda n, a: ("json", f"Calling the tool. {json.dumps({'name': n, 'arguments': a})}"),
    "fenced_json": lambda n, a: ("fenced_json", f"```json\n{json.dumps({'name': n, 'arguments': a})}\n```"),
    "xml_json_body": lambda n, a: ("xml", f'<tool name="{n}">{json.dumps(a)}</tool>'),
    "react": lambda n, a: ("react", f"Thought: go.\nAction: {n}\nAction Input: {json.dumps(a)}\nObservation:"),
    "code_call": lambda n, a: ("code_call", f"```python\n{n}({_python_kwargs(a)})\n```"),
}


@FUZZ
@given(name=_IDENTIFIER, style=st.sampled_from(sorted(RENDERERS)), data=st.data())
def test_round_trip_every_format(name, style, data):
    keys = _IDENTIFIER if style == "code_call" else _SAFE_TEXT  # code-call keywords must be identifiers
    arguments = data.draw(st.dictionaries(keys, _JSON_VALUES, min_size=1, max_size=4))
    expected_format, message = RENDERERS[style](name, arguments)
    result = parse_tool_calls(message)
    assert [(call.name, call.arguments) for call in result.calls] == [(name, arguments)]
    assert result.format == expected_format
    assert result.failure is None


@FUZZ
@given(ticker=_SAFE_TEXT, date=st.one_of(st.none(), _SAFE_TEXT), style=st.sampled_from(sorted(RENDERERS)))
def test_round_trip_with_schema_validation(ticker, date, style):
    arguments = {"ticker": ticker} if date is None else {"ticker": ticker, "date": date}
    expected_format, message = RENDERERS[style]("get_stock_price", arguments)
    result = parse_tool_calls(message, TOOLS)
    assert [(call.name, call.arguments) for call in result.calls] == [("get_stock_price", arguments)]
    assert result.format == expected_format
    assert result.failure is None


_XML_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp")), min_size=1, max_size=20
)


@FUZZ
@given(name=_IDENTIFIER, arguments=st.dictionaries(_IDENTIFIER, _XML_TEXT, min_size=1, max_size=4))
def test_round_trip_xml_child_elements(name, arguments):
    body = "".join(f"<{key}>{html.escape(value)}</{key}>" for key, value in arguments.items())
    result = parse_tool_calls(f'<tool name="{name}">{body}</tool>')
    assert [(call.name, call.arguments) for call in result.calls] == [(name, arguments)]
    assert result.format == "xml"


@FUZZ
@given(arguments=st.lists(st.sampled_from(["AAPL", "MSFT", "NVDA"]), min_size=1, max_size=5))
def test_round_trip_several_calls_in_order(arguments):
    message = "\n".join(
        f"<tool_call>{json.dumps({'name': 'get_stock_price', 'arguments': {'ticker': t}})}</tool_call>"
        for t in arguments
    )
    result = parse_tool_calls(message, TOOLS)
    assert [call.arguments["ticker"] for call in result.calls] == arguments


_WORDS = st.one_of(
    st.sampled_from(["the", "price", "AAPL", "was", "$172.62", "on", "2024-03-15", "I", "think", "so", "call", "me"]),
    st.text(alphabet=st.characters(whitelist_categories=("L", "N")), min_size=1, max_size=10),
)
_SEPARATORS = st.sampled_from([" ", ", ", ". ", "! ", "? ", "\n", "\n\n", " (", ") ", " - ", "; ", "'s "])
_PROSE = st.lists(st.tuples(_WORDS, _SEPARATORS), max_size=30).map(lambda pairs: "".join(w + s for w, s in pairs))


@FUZZ
@given(text=_PROSE)
def test_natural_language_is_a_plain_reply(text):
    for tools in (None, TOOLS):
        result = parse_tool_calls(text, tools)
        assert result.calls == []
        assert result.failure is ParseFailure.NO_CALL
        assert result.action == "respond"
        assert result.text == text.strip()
