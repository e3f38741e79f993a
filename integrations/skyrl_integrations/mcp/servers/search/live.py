"""Live backend of the search server: Tavily's ``POST /search`` and ``POST /extract``.

The key (``TAVILY_API_KEY``, environment or ``.env``) is sent as ``Authorization: Bearer <key>``, never in the URL or
body. Base URL: ``TAVILY_BASE_URL`` (default ``https://api.tavily.com``).
"""

from __future__ import annotations

import os

from .._common import LiveAPI, ToolError, require_api_key
from .offline import MAX_RESULTS

TAVILY_DEFAULT_URL = "https://api.tavily.com"
MAX_PAGE_CHARS = 4000


class LiveSearch:
    def __init__(self, key: str, base_url: str = TAVILY_DEFAULT_URL, timeout_s: float = 30.0) -> None:
        self._headers = {"Authorization": f"Bearer {key}"}
        self._api = LiveAPI("Tavily", base_url, secrets=[key], timeout_s=timeout_s)

    @classmethod
    def from_env(cls) -> LiveSearch:
        key = require_api_key("TAVILY_API_KEY", "search")
        return cls(key, os.environ.get("TAVILY_BASE_URL", TAVILY_DEFAULT_URL))

    def search(self, query: str, max_results: int = 3) -> dict:
        if not 1 <= max_results <= MAX_RESULTS:
            raise ToolError(f"max_results must be between 1 and {MAX_RESULTS}, got {max_results}")
        if not str(query).strip():
            raise ToolError("query is empty: describe what you are looking for")
        body = {"query": query, "max_results": max_results, "search_depth": "basic"}
        payload = self._api.request("POST", "/search", json_body=body, headers=self._headers)
        rows = payload.get("results") if isinstance(payload, dict) else None
        if not isinstance(rows, list):
            raise ToolError("Tavily API error: unexpected response (no 'results' list)")
        results = [
            {
                "title": r.get("title"),
                "url": r.get("url"),
                "content": r.get("content"),
                "score": round(float(r.get("score") or 0.0), 4),
            }
            for r in rows[:max_results]
        ]
        return {"query": query, "results": results}

    def fetch(self, url: str) -> dict:
        payload = self._api.request("POST", "/extract", json_body={"urls": [url]}, headers=self._headers)
        if not isinstance(payload, dict):
            raise ToolError("Tavily API error: unexpected response from /extract")
        for row in payload.get("results") or []:
            content = str(row.get("raw_content") or "")
            truncated = len(content) > MAX_PAGE_CHARS
            page = {"url": row.get("url", url), "title": row.get("title"), "content": content[:MAX_PAGE_CHARS]}
            return {**page, "truncated": True} if truncated else page
        failures = payload.get("failed_results") or []
        reason = failures[0].get("error") if failures and isinstance(failures[0], dict) else None
        raise ToolError(f"Could not fetch {url!r}" + (f": {reason}" if reason else ""))
