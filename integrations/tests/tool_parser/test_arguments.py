"""Argument checks and repairs against a tool's input schema, and tool-schema forms."""

import pytest

from skyrl_integrations.tool_parser import ToolRegistry, ToolSpec
from skyrl_integrations.tool_parser.arguments import check_arguments

SEARCH = ToolSpec.from_tool(
    {
        "name": "search",
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "max_results": {"type": "integer"},
                "threshold": {"type": "number"},
                "safe": {"type": "boolean"},
                "filters": {"type": "object"},
                "tags": {"anyOf": [{"type": "array"}, {"type": "null"}]},
                "sort": {"type": "string", "enum": ["date", "relevance"]},
            },
            "required": ["query"],
        },
    }
)
RUN = ToolSpec.from_tool(
    {
        "name": "run",
        "inputSchema": {
            "properties": {"code": {"type": "string"}, "timeout_seconds": {"type": "integer"}},
            "required": ["code"],
            "additionalProperties": False,
        },
    }
)


@pytest.mark.parametrize(
    ("spec", "arguments", "expected"),
    [
        (SEARCH, {"q": "x"}, {"query": "x"}),
        (SEARCH, {"searchQuery": "x"}, {"query": "x"}),
        (SEARCH, {"query": "x", "maxResults": 3}, {"query": "x", "max_results": 3}),
        (RUN, {"python_code": "1"}, {"code": "1"}),
        (RUN, {"code": "1", "timeout": 5}, {"code": "1", "timeout_seconds": 5}),
        (SEARCH, {"query": "x", "max_results": "10"}, {"query": "x", "max_results": 10}),
        (SEARCH, {"query": "x", "max_results": 10.0}, {"query": "x", "max_results": 10}),
        (SEARCH, {"query": "x", "threshold": "0.5"}, {"query": "x", "threshold": 0.5}),
        (SEARCH, {"query": "x", "safe": "False"}, {"query": "x", "safe": False}),
        (SEARCH, {"query": "x", "filters": '{"site": "sec.gov"}'}, {"query": "x", "filters": {"site": "sec.gov"}}),
        (SEARCH, {"query": "x", "tags": None}, {"query": "x", "tags": None}),
        (SEARCH, {"query": "x", "max_results": None}, {"query": "x"}),
        (SEARCH, {"query": "x", "extra": 1}, {"query": "x", "extra": 1}),
    ],
    ids=[
        "alias_table_q",
        "camel_case_words",
        "camel_case_same_name",
        "python_code_to_code",
        "timeout_words_subset",
        "numeric_string_to_integer",
        "integral_float_to_integer",
        "numeric_string_to_number",
        "boolean_string",
        "json_string_to_object",
        "null_allowed_by_anyof",
        "null_optional_dropped",
        "unknown_key_kept_when_schema_open",
    ],
)
def test_repairs(spec, arguments, expected):
    assert check_arguments(spec, arguments) == (expected, None)


@pytest.mark.parametrize(
    ("spec", "arguments", "message"),
    [
        (SEARCH, {}, "missing required argument(s) 'query'"),
        (SEARCH, {"query": 3}, "argument 'query' should be string, got int 3"),
        (SEARCH, {"query": "x", "max_results": "ten"}, "argument 'max_results' should be integer"),
        (SEARCH, {"query": "x", "max_results": "1.5"}, "argument 'max_results' should be integer"),
        (SEARCH, {"query": "x", "safe": "yes"}, "argument 'safe' should be boolean"),
        (SEARCH, {"query": "x", "sort": "newest"}, "argument 'sort' must be one of ['date', 'relevance']"),
        (SEARCH, {"query": None}, "argument 'query' should be string, got NoneType None"),
        (RUN, {"code": "1", "memory": 5}, "unknown argument 'memory' (arguments: code, timeout_seconds)"),
    ],
    ids=[
        "missing_required",
        "wrong_type",
        "non_numeric",
        "fractional_integer",
        "non_boolean",
        "enum",
        "required_null",
        "unknown_key_schema_closed",
    ],
)
def test_rejections_name_the_argument(spec, arguments, message):
    _, error = check_arguments(spec, arguments)
    assert message in error
    assert error.startswith(f"tool {spec.name!r}: ")


def test_ambiguous_alias_is_not_guessed():
    spec = ToolSpec.from_tool(
        {"name": "t", "inputSchema": {"properties": {"start_date": {}, "end_date": {}}, "required": ["start_date"]}}
    )
    assert check_arguments(spec, {"date": "2024-01-01"}) == (
        {"date": "2024-01-01"},
        "tool 't': missing required argument(s) 'start_date'",
    )


PRICE = ToolSpec.from_tool(
    {
        "name": "get_stock_price",
        "inputSchema": {
            "properties": {"ticker": {"type": "string"}, "date": {"type": "string"}},
            "required": ["ticker", "date"],
        },
    }
)


def test_two_keys_that_would_land_on_one_property_are_not_guessed():
    # Copied from a get_price_history demonstration: neither range end is "the" date of the price.
    arguments = {"ticker": "AAPL", "start_date": "2024-01-02", "end_date": "2024-01-31"}
    assert check_arguments(PRICE, arguments) == (
        arguments,
        "tool 'get_stock_price': missing required argument(s) 'date'",
    )


def test_one_key_whose_words_contain_the_property_is_still_repaired():
    assert check_arguments(PRICE, {"ticker": "AAPL", "trading_date": "2024-01-02"}) == (
        {"ticker": "AAPL", "date": "2024-01-02"},
        None,
    )


def test_openai_and_mcp_forms_give_the_same_spec():
    schema = {"type": "object", "properties": {"ticker": {"type": "string"}}, "required": ["ticker"]}
    mcp = ToolSpec.from_tool({"name": "price", "description": "d", "inputSchema": schema})
    openai = ToolSpec.from_tool({"type": "function", "function": {"name": "price", "parameters": schema}})
    pydantic_dump = ToolSpec.from_tool({"name": "price", "input_schema": schema})
    assert mcp == openai == pydantic_dump == ToolSpec("price", {"ticker": {"type": "string"}}, ("ticker",), True)


def test_tool_without_name_is_a_caller_error_naming_its_index():
    with pytest.raises(ValueError, match=r"tools\[1\]: missing or empty 'name'"):
        ToolRegistry.from_tools([{"name": "ok"}, {"description": "no name"}])


def test_registry_resolves_forgiving_names_only_when_unambiguous():
    registry = ToolRegistry.from_tools([{"name": "get_price"}, {"name": "Search"}, {"name": "search"}])
    assert registry.resolve("functions.Get-Price").name == "get_price"
    assert registry.resolve("search").name == "search"
    assert registry.resolve("SEARCH") is None  # "Search" and "search" normalise alike


def test_a_closed_registry_refuses_unknown_arguments_but_still_repairs_aliases():
    tool = {"name": "search", "inputSchema": {"properties": {"query": {"type": "string"}}, "required": ["query"]}}
    spec = ToolRegistry.from_tools([tool], closed=True).resolve("search")
    assert check_arguments(spec, {"q": "x"}) == ({"query": "x"}, None)
    assert (
        check_arguments(spec, {"query": "x", "extra": 1})[1]
        == "tool 'search': unknown argument 'extra' (arguments: query)"
    )
    assert check_arguments(ToolRegistry.from_tools([tool]).resolve("search"), {"query": "x", "extra": 1})[1] is None
