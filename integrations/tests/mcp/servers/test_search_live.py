"""The search server's live mode against a local server speaking Tavily's wire format."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from skyrl_integrations.mcp.servers._common import ToolError
from skyrl_integrations.mcp.servers.search.live import LiveSearch

TAVILY_KEY = "tvly-test-0123456789abcdef"  # pragma: allowlist secret


def tavily_app(requests: list[dict]) -> FastAPI:
    app = FastAPI()

    @app.post("/search")
    async def search(request: Request):
        body = await request.json()
        requests.append({"path": "/search", "authorization": request.headers.get("authorization"), "body": body})
        if request.headers.get("authorization") != f"Bearer {TAVILY_KEY}":
            return JSONResponse({"detail": {"error": "Unauthorized: missing or invalid API key."}}, status_code=401)
        if body["query"] == "too many":
            return JSONResponse({"detail": {"error": "Rate limit exceeded."}}, status_code=429)
        results = [
            {"title": "Kestrel River - Wikipedia", "url": "https://en.example.org/wiki/Kestrel_River",
             "content": "The Kestrel is a river ...", "score": 0.81234567, "raw_content": None},
            {"title": "Kestrel facts", "url": "https://facts.example/kestrel", "content": "Kestrels hover.",
             "score": 0.5, "raw_content": None},
        ]  # fmt: skip
        return {"query": body["query"], "follow_up_questions": None, "answer": None, "images": [],
                "results": results[: body["max_results"]], "response_time": 1.02}  # fmt: skip

    @app.post("/extract")
    async def extract(request: Request):
        body = await request.json()
        url = body["urls"][0]
        if url == "https://facts.example/kestrel":
            return {"results": [{"url": url, "raw_content": "Kestrels hover. " * 400, "images": []}],
                    "failed_results": [], "response_time": 0.3}  # fmt: skip
        return {"results": [], "failed_results": [{"url": url, "error": "Failed to fetch url"}], "response_time": 0.1}

    return app


@pytest.fixture
def wire(serve_asgi):
    requests: list[dict] = []
    with serve_asgi(tavily_app(requests)) as base_url:
        yield base_url, requests


@pytest.fixture
def live(wire):
    return LiveSearch(TAVILY_KEY, wire[0])


def test_search_maps_tavily_results(live):
    assert live.search("kestrel river", 1) == {
        "query": "kestrel river",
        "results": [
            {
                "title": "Kestrel River - Wikipedia",
                "url": "https://en.example.org/wiki/Kestrel_River",
                "content": "The Kestrel is a river ...",
                "score": 0.8123,
            }
        ],
    }


def test_key_is_a_bearer_header_and_not_in_the_body(live, wire):
    live.search("kestrel river", 2)
    assert wire[1][-1] == {
        "path": "/search",
        "authorization": f"Bearer {TAVILY_KEY}",
        "body": {"query": "kestrel river", "max_results": 2, "search_depth": "basic"},
    }


def test_rate_limit_is_a_tool_error(live):
    with pytest.raises(ToolError, match=r"Tavily API error \(HTTP 429\): rate limit exceeded; wait and retry"):
        live.search("too many")


def test_rejected_key_is_a_tool_error(wire):
    with pytest.raises(ToolError, match=r"HTTP 401\): the API key was rejected"):
        LiveSearch("tvly-wrong", wire[0]).search("kestrel")  # pragma: allowlist secret


def test_fetch_page_truncates_long_pages_and_says_so(live):
    page = live.fetch("https://facts.example/kestrel")
    assert (len(page["content"]), page["truncated"], page["url"]) == (4000, True, "https://facts.example/kestrel")


def test_fetch_page_failure_carries_tavilys_reason(live):
    with pytest.raises(ToolError, match="Could not fetch 'https://gone.example/': Failed to fetch url"):
        live.fetch("https://gone.example/")


def test_live_mode_without_a_key_exits_2_naming_the_variable():
    env = {k: v for k, v in os.environ.items() if k not in ("TAVILY_API_KEY", "SKYRL_DOTENV")}
    with tempfile.TemporaryDirectory() as empty_dir:
        result = subprocess.run(
            [sys.executable, "-m", "skyrl_integrations.mcp.servers.search", "--mode", "live"],
            env=env,
            cwd=empty_dir,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 2
    assert "error: the search server's live mode needs TAVILY_API_KEY" in result.stderr


async def test_live_process_reads_the_key_from_dotenv(wire, stdio_server, call_tool, tmp_path):
    (tmp_path / ".env").write_text(f"TAVILY_API_KEY={TAVILY_KEY}\n")
    client = stdio_server("search", "--mode", "live", env={"TAVILY_BASE_URL": wire[0]}, cwd=str(tmp_path))
    async with client:
        answer = await call_tool(client, "web_search", {"query": "kestrel", "max_results": 1})
    assert answer[1]["results"][0]["url"] == "https://en.example.org/wiki/Kestrel_River"
