"""Lenient JSON decoding: the repairs it makes, what it refuses, and bracket scanning in prose."""

import pytest

from skyrl_integrations.tool_parser.lenient_json import (
    JSONRepairError,
    bracket_regions,
    decode_json_prefix,
    decode_json_sequence,
    loads_lenient,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ("{'a': 'it\\'s'}", {"a": "it's"}),
        ('{"a": [1, 2,],}', {"a": [1, 2]}),
        ('{"a": True, "b": False, "c": None}', {"a": True, "b": False, "c": None}),
        ('{"a": {"b": 1}', {"a": {"b": 1}}),
        ('{"a": "unterminated', {"a": "unterminated"}),
        ('{"s": "True, None,]"}', {"s": "True, None,]"}),
        ('{"code": "line1\nline2"}', {"code": "line1\nline2"}),
    ],
    ids=[
        "strict",
        "single_quotes",
        "trailing_commas",
        "python_literals",
        "missing_brace",
        "unterminated_string",
        "repairs_skip_string_contents",
        "raw_newline_in_string",
    ],
)
def test_loads_lenient_repairs(text, expected):
    assert loads_lenient(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": }', "Expecting value"),
        ('{"a": 1]', "Expecting ',' delimiter"),
        ('{"n": ' + "1" * 5000 + "}", "number literal too large"),
        ("[" * 100_000, "nested too deeply"),
        ('{"a": 1} trailing', "unexpected text after the JSON value"),
    ],
    ids=["missing_value", "mismatched_bracket", "huge_integer", "deep_nesting", "trailing_text"],
)
def test_loads_lenient_refuses_with_a_reason(text, message):
    with pytest.raises(JSONRepairError, match=message):
        loads_lenient(text)


def test_decode_json_prefix_stops_at_the_value_end():
    assert decode_json_prefix('xx {"a": 1} tail', 3) == ({"a": 1}, 11)


def test_decode_json_prefix_without_repair_refuses_repairable_text():
    with pytest.raises(JSONRepairError):
        decode_json_prefix("{'a': 1}", repair=False)


def test_decode_json_sequence_reads_consecutive_values_and_stops_at_prose():
    text = '{"a": 1}\n{"b": 2}, [3] and then prose'
    values, end = decode_json_sequence(text, 0, len(text))
    assert [value for value, _, _ in values] == [{"a": 1}, {"b": 2}, [3]]
    assert text[end:] == " and then prose"


def test_bracket_regions_lists_nested_regions_and_ignores_prose_quotes():
    text = 'don\'t {"k": [1, "}"]} it\'s [x'
    assert bracket_regions(text) == [(6, 21), (12, 20), (27, 29)]
