"""Replaying tool calls and reading answers out of tool results."""

from __future__ import annotations

import json

import pytest

from skyrl_integrations.datasets.replay import (
    ToolServers,
    answer_from_result,
    answer_in_results,
    format_answer,
    scalar_fields,
)
from skyrl_integrations.datasets.schema import ToolStep

PRICE = '{"ticker":"AAPL","date":"2024-03-15","open":172.08,"close":176.78,"volume":12340109}'
SEARCH = '{"query":"q","results":[{"title":"Helix","url":"https://h.example/a","content":"' + "x" * 200 + '"}]}'


@pytest.mark.parametrize(
    ("value", "text"),
    [(176.78, "176.78"), (4200, "4200"), (True, "true"), (" AAPL ", "AAPL"), (None, None), ([1], None), ("", None)],
)
def test_format_answer(value, text):
    assert format_answer(value) == text


def test_answer_from_result_reads_a_dotted_field():
    assert answer_from_result(PRICE, "close") == "176.78"
    assert answer_from_result(SEARCH, "results.0.url") == "https://h.example/a"


def test_answer_from_result_without_field_needs_a_scalar_result():
    assert answer_from_result('"391"') == "391"
    assert answer_from_result("391\n") == "391"
    assert answer_from_result(PRICE) is None


def test_missing_fields_and_long_values_are_no_answer():
    assert answer_from_result(PRICE, "price") is None
    assert answer_from_result(SEARCH, "results.3.url") is None
    assert answer_from_result(SEARCH, "results.0.content") is None  # 200 characters of prose


def test_scalar_fields_lists_top_level_and_first_item_fields():
    assert scalar_fields(SEARCH) == {"query": "q", "results.0.title": "Helix", "results.0.url": "https://h.example/a"}
    assert scalar_fields("plain text") == {}


def test_numeric_answer_is_a_result_number_at_its_precision():
    assert answer_in_results("176.78", "numeric", [PRICE])
    assert answer_in_results("176.8", "numeric", [PRICE])  # written with one decimal: within 0.05
    assert not answer_in_results("176.9", "numeric", [PRICE])


def test_numeric_answer_may_be_a_sum_or_difference_of_two_result_numbers():
    later = '{"ticker":"AAPL","date":"2024-03-18","close":173.72}'
    assert answer_in_results("-3.06", "numeric", [PRICE, later])  # 173.72 - 176.78
    assert answer_in_results("350.5", "numeric", [PRICE, later])  # 176.78 + 173.72
    assert not answer_in_results("3.2", "numeric", [PRICE, later])


def test_exact_and_contains_answers():
    assert answer_in_results("aapl", "exact", [PRICE])
    assert not answer_in_results("AAP", "exact", [PRICE])
    assert answer_in_results("h.example/a", "contains", [SEARCH])


@pytest.fixture(scope="module")
def servers():
    with ToolServers.bundled(["market", "search"]) as servers:
        yield servers


def test_run_calls_the_steps_in_order(servers):
    steps = [
        ToolStep(1, "market", "get_company_profile", {"ticker": "HLXR"}),
        ToolStep(2, "market", "get_stock_price", {"ticker": "HLXR", "date": "2024-03-15"}),
    ]
    first, second = servers.run(steps)
    assert (json.loads(first.text)["employees"], json.loads(second.text)["close"]) == (4200, 37.96)


def test_run_stops_at_the_first_failed_call(servers):
    steps = [ToolStep(1, "market", "get_company_profile", {"ticker": "ZZZZ"}), ToolStep(2, "market", "search_tickers")]
    (failed,) = servers.run(steps)
    assert (failed.is_error, failed.error_kind) == (True, "tool_error")


def test_missing_arguments_are_the_required_ones_left_out(servers):
    assert servers.missing_arguments(ToolStep(1, "search", "web_search", {"max_results": 1})) == ["query"]
    assert servers.missing_arguments(ToolStep(1, "search", "web_search", {"query": "q"})) == []


def test_tool_servers_maps_tools_to_their_server(servers):
    owners = servers.tool_servers()
    assert (owners["get_stock_price"], owners["web_search"]) == ("market", "search")


def test_unknown_server_is_a_clear_error(servers):
    with pytest.raises(KeyError, match="unknown server 'weather'; configured servers: market, search"):
        servers.group("weather")
