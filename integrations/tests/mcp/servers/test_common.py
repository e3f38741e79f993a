"""The bundled servers' shared scaffolding: keys from env/.env, error helpers, the live HTTP client's failures."""

from __future__ import annotations

import os
import socket
import time

import pytest
from fastapi import FastAPI

from skyrl_integrations.mcp.servers._common import (
    LiveAPI,
    LiveModeError,
    ToolError,
    api_key,
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
