"""Shared scaffolding for the bundled MCP servers. The whole API:

- ``serve(build, argv=None)``: the ``__main__`` of every server. Parses ``--transport {stdio,streamable-http}``
  (default stdio), ``--host`` (127.0.0.1), ``--port`` (8000), ``--mode {offline,live}`` (default offline),
  ``--log-level`` (default WARNING, to stderr), calls ``build(mode)`` to get an ``MCPServer`` and runs it. A ``LiveModeError`` raised by ``build`` (live mode without a
  key, or a server that has no live mode) is printed to stderr and the process exits with status 2.
- ``api_key(name)``: a secret from ``os.environ``, else from a ``.env`` file (``$SKYRL_DOTENV`` if set, else
  ``./.env``), else ``None``. The ``.env`` values are read, never copied into ``os.environ``.
- ``require_api_key(name, server)``: ``api_key`` or a ``LiveModeError`` that says where to put the key.
- ``LiveModeError``: live mode cannot start (missing key, unsupported).
- ``ToolError``: raise it inside a tool; the client gets an ``isError`` result carrying the message.
  (Any other exception reaches the model only as "Error executing tool <name>".)
- ``unknown_value_error(kind, value, valid)``: a ``ToolError`` such as
  ``Unknown ticker 'XYZ'. Valid tickers include: AAPL, AMZN, ...``.
- ``lookup_error(kind, tool, by)``: a ``ToolError`` that names the tool which finds a valid value instead of listing
  values, e.g. ``Unknown ticker: search_tickers finds tickers by company name``.
- ``to_json(obj)``: compact JSON text, the output format of every tool (small models have small contexts).
- ``LiveAPI(service, base_url, secrets=..., headers=..., max_retries=0)``: a tiny JSON-over-HTTP client for live
  modes; HTTP 401/403/404/429/5xx, timeouts and connection errors become ``ToolError`` messages with the secrets
  scrubbed out, and httpx's request logging (which would print query-string keys) is silenced. With ``max_retries``
  it waits out an HTTP 429's ``Retry-After`` (up to ``max_retry_wait_s``) and retries; giving up raises
  ``RateLimitError``, a ``ToolError`` that carries the wait the server asked for.

Tools are registered with ``@server.tool(structured_output=False)`` and return ``to_json(...)``, so the result is
one short text block.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

import httpx
from dotenv import dotenv_values
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

__all__ = [
    "LiveAPI",
    "LiveModeError",
    "Mode",
    "RateLimitError",
    "ToolError",
    "api_key",
    "lookup_error",
    "require_api_key",
    "serve",
    "to_json",
    "unknown_value_error",
]

Mode = Literal["offline", "live"]


class LiveModeError(RuntimeError):
    """Live mode was requested but cannot run (no API key configured, or the server has no live mode)."""


def serve(build: Callable[[Mode], MCPServer], argv: Sequence[str] | None = None) -> None:
    """Parse the common command line, build the server for the chosen mode and run it until the transport closes."""
    parser = argparse.ArgumentParser(description="Run a bundled skyrl MCP server.")
    parser.add_argument("--transport", choices=("stdio", "streamable-http"), default="stdio")
    parser.add_argument("--host", default="127.0.0.1", help="bind address for streamable-http")
    parser.add_argument("--port", type=int, default=8000, help="port for streamable-http")
    parser.add_argument(
        "--mode",
        choices=("offline", "live"),
        default="offline",
        help="offline: deterministic bundled data; live: the real API (needs its key in the environment or .env)",
    )
    parser.add_argument("--log-level", choices=("DEBUG", "INFO", "WARNING", "ERROR"), default="WARNING")
    args = parser.parse_args(argv)
    # Configured before the MCPServer exists, so its own logging.basicConfig (INFO, every tool error) is a no-op.
    logging.basicConfig(level=args.log_level, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    try:
        server = build(args.mode)
    except LiveModeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if args.transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=args.host, port=args.port)


def _dotenv_path() -> Path:
    explicit = os.environ.get("SKYRL_DOTENV")
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise LiveModeError(f"SKYRL_DOTENV points to {path}, which is not a file")
        return path
    return Path.cwd() / ".env"


def api_key(name: str) -> str | None:
    """The value of secret ``name`` from the environment, else from the ``.env`` file, else ``None``."""
    value = os.environ.get(name)
    if value:
        return value
    path = _dotenv_path()
    if not path.is_file():
        return None
    return dotenv_values(path).get(name) or None


def require_api_key(name: str, server: str) -> str:
    """``api_key(name)``, or a ``LiveModeError`` telling the user how to provide it."""
    value = api_key(name)
    if value is None:
        raise LiveModeError(
            f"the {server} server's live mode needs {name}: set it in the environment or in a .env file "
            f"(./.env or the file named by SKYRL_DOTENV), or run with --mode offline"
        )
    return value


def unknown_value_error(kind: str, value: Any, valid: Iterable[str], limit: int = 8) -> ToolError:
    """A ``ToolError`` naming the bad value and a few valid ones, so the model can correct its call."""
    choices = sorted(valid)
    shown = ", ".join(choices[:limit]) + (", ..." if len(choices) > limit else "")
    return ToolError(f"Unknown {kind} {value!r}. Valid {kind}s include: {shown}")


def lookup_error(kind: str, tool: str, by: str) -> ToolError:
    """A ``ToolError`` for an unknown ``kind`` that names the ``tool`` finding valid ones ``by`` something, and neither
    quotes the bad value back nor lists valid ones: a small model copies a quoted value into its retry, and a listed
    value can be the very argument its task asks it to find (learnings/main-job-tool-choice.md)."""
    return ToolError(f"Unknown {kind}: {tool} finds {kind}s by {by}")


def to_json(obj: Any) -> str:
    """Compact JSON (no spaces after separators): the text every tool returns."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


class RateLimitError(ToolError):
    """HTTP 429 that ``LiveAPI`` did not (or no longer) retry; ``retry_after_s`` is the wait the server asked for."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class LiveAPI:
    """JSON over HTTP for a live mode, with every failure turned into a clear ``ToolError``.

    ``secrets`` are scrubbed from every error message. ``headers`` go with every request (e.g. a bearer token); pass
    other keys as ``params``/``headers``/``json_body`` per request. An HTTP 429 is retried up to ``max_retries``
    times after sleeping its ``Retry-After`` seconds (1 if absent or not a number), unless that exceeds
    ``max_retry_wait_s``; then (or with the default ``max_retries=0``) it is a ``RateLimitError``.
    """

    def __init__(
        self,
        service: str,
        base_url: str,
        *,
        secrets: Sequence[str] = (),
        headers: dict[str, str] | None = None,
        timeout_s: float = 20.0,
        max_retries: int = 0,
        max_retry_wait_s: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        # httpx logs "HTTP Request: GET <full url>" at INFO, which would put query-string API keys in the logs.
        logging.getLogger("httpx").setLevel(logging.WARNING)
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self.service = service
        self.base_url = base_url.rstrip("/")
        self.max_retries = max_retries
        self.max_retry_wait_s = max_retry_wait_s
        self._secrets = [s for s in secrets if s]
        self._timeout_s = timeout_s
        self._sleep = sleep
        self._client = httpx.Client(base_url=self.base_url, timeout=timeout_s, headers=headers)

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json_body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """Send one request (retrying rate limits) and return the decoded JSON body; raise ``ToolError`` on failure."""
        for attempt in range(self.max_retries + 1):
            response = self._send(method, path, params=params, json=json_body, headers=headers)
            if response.status_code != 429:
                break
            wait = _retry_after_s(response)
            if attempt == self.max_retries or wait > self.max_retry_wait_s:
                raise RateLimitError(self._status_message(response), retry_after_s=wait)
            self._sleep(wait)
        if response.status_code >= 400:
            raise ToolError(self._status_message(response))
        try:
            return response.json()
        except ValueError:
            raise ToolError(f"{self.service} API returned a non-JSON body (HTTP {response.status_code})") from None

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self._client.request(method, path, **kwargs)
        except httpx.TimeoutException:
            raise ToolError(f"{self.service} API did not answer within {self._timeout_s:g}s; try again") from None
        except httpx.TransportError as exc:
            raise ToolError(
                f"{self.service} API unreachable at {self.base_url} ({type(exc).__name__}); check the network "
                f"or the base URL"
            ) from None

    def _status_message(self, response: httpx.Response) -> str:
        code = response.status_code
        if code == 429:
            what = f"rate limit exceeded; wait and retry after {_retry_after_s(response):g} s"
        elif code in (401, 403):
            what = "the API key was rejected; check it"
        elif code == 404:
            what = "not found"
        elif code >= 500:
            what = "server error; try again later"
        else:
            what = "request rejected"
        detail = self.redact(response.text).strip().replace("\n", " ")[:200]
        return f"{self.service} API error (HTTP {code}): {what}" + (f". Response: {detail}" if detail else "")

    def redact(self, text: str) -> str:
        """``text`` with every configured secret replaced by ``<redacted>``."""
        for secret in self._secrets:
            text = text.replace(secret, "<redacted>")
        return text

    def close(self) -> None:
        self._client.close()


def _retry_after_s(response: httpx.Response) -> float:
    """The ``Retry-After`` of a 429 in seconds; 1 when it is missing, negative or not a number (e.g. an HTTP date)."""
    try:
        wait = float(response.headers.get("Retry-After", ""))
    except ValueError:
        return 1.0
    return wait if wait >= 0 else 1.0  # NaN fails the comparison too
