"""Tool schemas shaped like the bundled MCP servers' (MCP form) plus one in OpenAI form."""

import pytest

TOOLS = [
    {
        "name": "get_stock_price",
        "description": "Closing price of a stock on a date.",
        "inputSchema": {
            "type": "object",
            "properties": {"ticker": {"type": "string"}, "date": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
            "required": ["ticker"],
        },
    },
    {
        "name": "web_search",
        "description": "Search the web.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "max_results": {"type": "integer"},
                "safe": {"type": "boolean"},
                "filters": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["query"],
        },
    },
    {
        "name": "execute_python",
        "description": "Run Python code in a sandbox.",
        "inputSchema": {
            "type": "object",
            "properties": {"code": {"type": "string"}},
            "required": ["code"],
            "additionalProperties": False,
        },
    },
    {
        "type": "function",
        "function": {
            "name": "send_message",
            "description": "Post to a Slack channel.",
            "parameters": {
                "type": "object",
                "properties": {
                    "channel": {"type": "string"},
                    "text": {"type": "string"},
                    "priority": {"type": "string", "enum": ["low", "high"]},
                },
                "required": ["channel", "text"],
            },
        },
    },
    {"name": "list_channels", "description": "All channels.", "inputSchema": {"type": "object", "properties": {}}},
]


@pytest.fixture
def tools():
    return TOOLS
