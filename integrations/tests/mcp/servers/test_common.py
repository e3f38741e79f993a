"""The bundled servers' shared scaffolding: keys from env/.env, error helpers, the live HTTP client's failures."""

from __future__ import annotations

import os
import socket
import time

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from skyrl_integrations.mcp.servers._common import (
    LiveAPI,
    LiveModeError,
    RateLimitError,
    ToolError,
    api_key,
    lookup_error,
    require_api_key,
    to_json,
    unknown_value_error,
)

KEY_NAME = "SKYRL_TEST_SERVICE_KEY"


@pytest.fixture
def no_key(monkeypatch, tmp_path):
    """No ``SKYRL_TEST_SERVICE_KEY`` in the environment; the working directory is an empty temp dir."""
    monkeypatch.delenv(KEY_NAME, raising=False)
    monkeypatch.delenv("SKYRL_DOTENV", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_api_key_comes_from_the_environment_first(no_key, monkeypatch):
    (no_key / ".env").write_text(f"{KEY_NAME}=from-dotenv\n")
    monkeypatch.setenv(KEY_NAME, "from-env")
    assert api_key(KEY_NAME) == "from-env"


def test_api_key_falls_back_to_dotenv_in_the_working_directory(no_key):
    (no_key / ".env").write_text(f"{KEY_NAME}=from-dotenv\n")
    assert api_key(KEY_NAME) == "from-dotenv"


def test_api_key_from_dotenv_is_not_copied_into_the_environment(no_key):
    (no_key / ".env").write_text(f"{KEY_NAME}=from-dotenv\n")
    api_key(KEY_NAME)
    assert KEY_NAME not in os.environ


def test_skyrl_dotenv_names_the_file_to_read(no_key, monkeypatch, tmp_path_factory):
    other = tmp_path_factory.mktemp("secrets") / "keys.env"
    other.write_text(f"{KEY_NAME}=from-skyrl-dotenv\n")
    monkeypatch.setenv("SKYRL_DOTENV", str(other))
    assert api_key(KEY_NAME) == "from-skyrl-dotenv"


def test_skyrl_dotenv_pointing_nowhere_is_a_live_mode_error(no_key, monkeypatch):
    monkeypatch.setenv("SKYRL_DOTENV", str(no_key / "missing.env"))
    with pytest.raises(LiveModeError, match=r"SKYRL_DOTENV points to .*missing\.env, which is not a file"):
        api_key(KEY_NAME)


def test_missing_key_is_none(no_key):
    assert api_key(KEY_NAME) is None


def test_require_api_key_says_where_to_put_the_key(no_key):
    with pytest.raises(LiveModeError, match=f"the demo server's live mode needs {KEY_NAME}: set it in the environment"):
        require_api_key(KEY_NAME, "demo")


def test_unknown_value_error_shows_a_few_sorted_choices():
    error = unknown_value_error("ticker", "ZZ", ["MSFT", "AAPL", "KO"], limit=2)
    assert (type(error), str(error)) == (ToolError, "Unknown ticker 'ZZ'. Valid tickers include: AAPL, KO, ...")


def test_lookup_error_names_the_finding_tool_without_the_bad_value():
    error = lookup_error("ticker", "search_tickers", "company name")
    assert (type(error), str(error)) == (ToolError, "Unknown ticker: search_tickers finds tickers by company name")


def test_to_json_is_compact():
    assert to_json({"a": [1, 2], "b": "é"}) == '{"a":[1,2],"b":"é"}'


def test_unreachable_api_is_a_tool_error_naming_the_base_url():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound but not listening: connections are refused
        api = LiveAPI("Demo", f"http://127.0.0.1:{port}", timeout_s=5)
        with pytest.raises(ToolError, match=rf"Demo API unreachable at http://127.0.0.1:{port} \(ConnectError\)"):
            api.request("GET", "/x")


def test_slow_api_is_a_timeout_tool_error(serve_asgi):
    app = FastAPI()

    @app.get("/slow")
    def slow():
        time.sleep(1.0)
        return {}

    with serve_asgi(app) as base_url:
        api = LiveAPI("Demo", base_url, timeout_s=0.2)
        with pytest.raises(ToolError, match=r"Demo API did not answer within 0.2s; try again"):
            api.request("GET", "/slow")


def test_error_bodies_are_scrubbed_of_secrets(serve_asgi):
    secret = "sk-live-abcdef123456"  # pragma: allowlist secret
    app = FastAPI()

    @app.get("/echo")
    def echo(key: str):
        from fastapi.responses import JSONResponse

        return JSONResponse({"error": f"bad key {key}"}, status_code=400)

    with serve_asgi(app) as base_url:
        api = LiveAPI("Demo", base_url, secrets=[secret])
        with pytest.raises(ToolError) as caught:
            api.request("GET", "/echo", params={"key": secret})
    assert str(caught.value) == 'Demo API error (HTTP 400): request rejected. Response: {"error":"bad key <redacted>"}'


def rate_limited_app(limited: int, retry_after: str | None) -> tuple[FastAPI, list[str]]:
    """``GET /quote`` answers HTTP 429 (with ``Retry-After: retry_after`` unless None) ``limited`` times, then 200."""
    app = FastAPI()
    calls: list[str] = []

    @app.get("/quote")
    def quote():
        calls.append("quote")
        if len(calls) <= limited:
            headers = {} if retry_after is None else {"Retry-After": retry_after}
            return JSONResponse({"error": "slow down"}, status_code=429, headers=headers)
        return {"price": 1.5}

    return app, calls


def test_rate_limit_is_retried_after_the_retry_after_wait(serve_asgi):
    app, calls = rate_limited_app(limited=1, retry_after="2")
    slept: list[float] = []
    with serve_asgi(app) as base_url:
        api = LiveAPI("Demo", base_url, max_retries=2, sleep=slept.append)
        assert api.request("GET", "/quote") == {"price": 1.5}
    assert (len(calls), slept) == (2, [2.0])


@pytest.mark.parametrize("retry_after", [None, "Wed, 21 Oct 2015 07:28:00 GMT", "-3"])
def test_missing_or_unusable_retry_after_waits_one_second(serve_asgi, retry_after):
    app, calls = rate_limited_app(limited=1, retry_after=retry_after)
    slept: list[float] = []
    with serve_asgi(app) as base_url:
        assert LiveAPI("Demo", base_url, max_retries=1, sleep=slept.append).request("GET", "/quote") == {"price": 1.5}
    assert (len(calls), slept) == (2, [1.0])


def test_rate_limit_gives_up_when_the_retries_are_exhausted(serve_asgi):
    app, calls = rate_limited_app(limited=5, retry_after="1")
    slept: list[float] = []
    with serve_asgi(app) as base_url:
        api = LiveAPI("Demo", base_url, max_retries=2, sleep=slept.append)
        with pytest.raises(RateLimitError) as caught:
            api.request("GET", "/quote")
    assert str(caught.value) == (
        'Demo API error (HTTP 429): rate limit exceeded; wait and retry after 1 s. Response: {"error":"slow down"}'
    )
    assert (caught.value.retry_after_s, len(calls), slept) == (1.0, 3, [1.0, 1.0])


def test_rate_limit_with_a_retry_after_beyond_the_cap_fails_at_once(serve_asgi):
    app, calls = rate_limited_app(limited=1, retry_after="120")
    slept: list[float] = []
    with serve_asgi(app) as base_url:
        api = LiveAPI("Demo", base_url, max_retries=3, max_retry_wait_s=10, sleep=slept.append)
        with pytest.raises(
            ToolError, match=r"^Demo API error \(HTTP 429\): rate limit exceeded; wait and retry after 120 s"
        ):
            api.request("GET", "/quote")
    assert (len(calls), slept) == (1, [])


def test_rate_limit_is_not_retried_by_default(serve_asgi):
    app, calls = rate_limited_app(limited=1, retry_after="1")
    slept: list[float] = []
    with serve_asgi(app) as base_url:
        api = LiveAPI("Demo", base_url, sleep=slept.append)
        with pytest.raises(RateLimitError, match=r"HTTP 429\): rate limit exceeded; wait and retry after 1 s"):
            api.request("GET", "/quote")
    assert (len(calls), slept) == (1, [])


def test_default_headers_go_with_every_request_and_per_request_headers_add_to_them(serve_asgi):
    app = FastAPI()

    @app.get("/whoami")
    def whoami(request: Request):
        return {"authorization": request.headers.get("authorization"), "x-extra": request.headers.get("x-extra")}

    with serve_asgi(app) as base_url:
        api = LiveAPI("Demo", base_url, headers={"Authorization": "Bearer t0ken"})
        assert api.request("GET", "/whoami") == {"authorization": "Bearer t0ken", "x-extra": None}
        assert api.request("GET", "/whoami", headers={"X-Extra": "1"}) == {
            "authorization": "Bearer t0ken",
            "x-extra": "1",
        }
