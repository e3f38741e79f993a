"""`MCPToolGroup`: tools of one MCP server (official MCP Python SDK), over stdio or streamable HTTP.

Sessions. The SDK is asyncio-based and a session must stay on the event loop that opened it, while envs are
stepped from the generator's loop, from worker threads or synchronously. So each process owns one background
event-loop thread (`_SessionPool`) holding one live session per `MCPServerSpec.key`; every group with an equal
spec, in every episode, reuses it. The sync methods (`list_tools`, `call_tool`) block on that loop; the async
twins (`list_tools_async`, `call_tool_async`) await it from any other loop. `MCPToolGroup.close()` releases the
group only: the shared server keeps running for the next episode. `close_all_sessions()` stops every server; it
runs at interpreter exit.

Failures never raise out of `call_tool`; they come back as a `ToolResult` with an `error_kind`:

- ``"tool_error"``: the tool ran and reported an error (`isError`), or the server answered with a JSON-RPC error.
  Not retried: the model sees the message and may try again.
- ``"timeout"``: no answer within `call_timeout_s` (the SDK sends the server a cancel). The session is then
  probed with a ``tools/list`` request; a server that does not answer within `PROBE_TIMEOUT_S` is wedged (e.g. a
  tool blocking its event loop) and is replaced by a fresh one on the next call. A responsive one is kept.
- ``"server_crashed"``: the connection died during the call (process exited, HTTP connection lost), or the
  server could not be (re)started. The dead session is dropped and the next call starts a new server (for a URL,
  reconnects). Callers treat this as an infrastructure failure, not as the agent's mistake.
- ``"unknown_tool"`` / ``"not_allowed"``: refused locally without a round trip.

Starting or connecting to a server is retried `retries` times with exponential backoff (`RETRY_BACKOFF_S`);
`list_tools` raises `MCPServerError` when it still fails. A tool call itself is never re-sent. Outputs longer than
`max_output_chars` are cut, with a marker such as ``...[truncated 1048576 -> 4000 chars]``.
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import functools
import json
import logging
import os
import threading
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, TypeVar

from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

from skyrl_gym.tools.core import ToolGroup
from skyrl_integrations.mcp.spec import MCPServerSpec

logger = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_CALL_TIMEOUT_S = 30.0
DEFAULT_MAX_OUTPUT_CHARS = 4000
DEFAULT_RETRIES = 2
DEFAULT_CONNECT_TIMEOUT_S = 60.0
"""Starting a server process, the handshake and the first ``tools/list``."""
RETRY_BACKOFF_S = 0.5
"""First wait before re-trying a failed connect; doubles on each further attempt."""
PROBE_TIMEOUT_S = 2.0
"""A ``tools/list`` probe after a timed-out call must answer within this, or the server is restarted."""
CALL_GRACE_S = 5.0
"""Extra time, past the per-call timeout, before a call is abandoned even if the SDK's own timeout never fired."""
CLOSE_TIMEOUT_S = 10.0
"""How long closing a session may take (the SDK escalates stdin close -> SIGTERM -> SIGKILL within that)."""
MAX_LIST_PAGES = 100

ERROR_KINDS = ("tool_error", "timeout", "server_crashed", "unknown_tool", "not_allowed")


@dataclasses.dataclass(frozen=True)
class ToolResult:
    """The outcome of one tool call, as text for the model plus how it went."""

    text: str
    is_error: bool = False
    error_kind: str | None = None
    """None on success, else one of `ERROR_KINDS`."""
    truncated: bool = False
    """The output was longer than `max_output_chars` and was cut."""

    def __post_init__(self):
        if self.error_kind is not None and self.error_kind not in ERROR_KINDS:
            raise ValueError(f"unknown error_kind {self.error_kind!r}; expected None or one of {ERROR_KINDS}")


class MCPServerError(RuntimeError):
    """An MCP server could not be started or reached (after the configured retries)."""


class _ConnectionLost(Exception):
    """The session ended (server exited / connection dropped) while a request was pending."""


# ------------------------------------------------------------------------------------------------ sessions


class _Connection:
    """One live MCP session. A dedicated task on the pool loop enters and exits the SDK client (its cancel
    scopes must be entered and left by the same task); requests are made from other tasks meanwhile."""

    def __init__(self, spec: MCPServerSpec):
        self.spec = spec
        self.client: Client | None = None
        self.tools: list[dict[str, Any]] = []
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None

    async def open(self, timeout: float) -> None:
        ready = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._serve(ready), name=f"mcp-session-{self.spec.name}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), timeout)
        except BaseException:
            await self.close()
            raise

    async def _serve(self, ready: asyncio.Future) -> None:
        try:
            async with Client(_transport(self.spec), cache=None) as client:
                self.client = client
                self.tools = await _list_all_tools(client)
                ready.set_result(None)
                await self._stop.wait()
        except Exception as exc:
            if not ready.done():
                ready.set_exception(exc)
            elif not self._stop.is_set():
                logger.warning("MCP server %r: session ended: %s", self.spec.name, _describe(exc))
        finally:
            if not ready.done():  # cancelled or closed while connecting
                ready.set_exception(_ConnectionLost())

    @property
    def alive(self) -> bool:
        return self._task is not None and not self._task.done() and not self._stop.is_set()

    async def request(self, make_call: Callable[[Client], Coroutine[Any, Any, T]], timeout: float) -> T:
        """Run one request; `_ConnectionLost` if the session ends first, `TimeoutError` after `timeout`."""
        if not self.alive:
            raise _ConnectionLost()
        call = asyncio.ensure_future(make_call(self.client))
        try:
            done, _ = await asyncio.wait({call, self._task}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:  # also when the caller is cancelled (e.g. a trajectory timeout): no orphaned request
            if not call.done():
                call.cancel()
                await asyncio.gather(call, return_exceptions=True)
        if call in done:
            return call.result()
        if self._task in done:
            raise _ConnectionLost()
        raise TimeoutError()

    async def responsive(self) -> bool:
        try:
            await self.request(_list_all_tools, PROBE_TIMEOUT_S)
        except Exception:
            return False
        return True

    async def close(self) -> None:
        self._stop.set()
        if self._task is None or self._task.done():
            return
        _, pending = await asyncio.wait({self._task}, timeout=CLOSE_TIMEOUT_S)
        if pending:
            logger.warning(
                "MCP server %r: session did not close within %ss; cancelling", self.spec.name, CLOSE_TIMEOUT_S
            )
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


def _transport(spec: MCPServerSpec) -> StdioServerParameters | str:
    if spec.url:
        return spec.url
    return StdioServerParameters(command=spec.command[0], args=list(spec.command[1:]), env=dict(spec.env), cwd=spec.cwd)


async def _list_all_tools(client: Client) -> list[dict[str, Any]]:
    """Every tool of the server (all pages of ``tools/list``) in MCP form: name, description, inputSchema."""
    tools, cursor = [], None
    for _ in range(MAX_LIST_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools += [
            {"name": t.name, "description": t.description or "", "inputSchema": t.input_schema} for t in page.tools
        ]
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


class _SessionPool:
    """The per-process pool: a daemon thread running an event loop that owns every live session."""

    def __init__(self):
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="skyrl-mcp-sessions", daemon=True)
        self._thread.start()
        self._connections: dict[tuple, _Connection] = {}
        self._locks: dict[tuple, asyncio.Lock] = {}
        self._closing: set[asyncio.Task] = set()

    def run_sync(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise RuntimeError("a sync MCPToolGroup method was called from the MCP session loop; await *_async")
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    async def run_async(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if asyncio.get_running_loop() is self.loop:
            return await coroutine
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, self.loop))

    async def connection(self, spec: MCPServerSpec, timeout: float) -> tuple[_Connection, bool]:
        """The live session for `spec` and whether it was just opened (the caller then has a fresh tool list)."""
        lock = self._locks.setdefault(spec.key, asyncio.Lock())
        async with lock:
            current = self._connections.get(spec.key)
            if current is not None and current.alive:
                return current, False
            connection = _Connection(spec)
            await connection.open(timeout)
            self._connections[spec.key] = connection
            logger.info("MCP server %r: session started (%s)", spec.name, spec.transport)
            return connection, True

    def discard(self, connection: _Connection) -> None:
        """Drop a dead or wedged session; it is closed in the background so the caller does not wait for it."""
        if self._connections.get(connection.spec.key) is connection:
            del self._connections[connection.spec.key]
        task = asyncio.ensure_future(connection.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close_all(self) -> None:
        connections = list(self._connections.values())
        self._connections.clear()
        await asyncio.gather(*(c.close() for c in connections), *self._closing, return_exceptions=True)

    def shutdown(self) -> None:
        if self.loop.is_closed():
            return
        try:
            asyncio.run_coroutine_threadsafe(self.close_all(), self.loop).result(CLOSE_TIMEOUT_S + 5)
        except Exception:
            logger.warning("MCP sessions did not shut down cleanly", exc_info=True)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self.loop.close()


_pool: _SessionPool | None = None
_pool_lock = threading.Lock()
_atexit_registered = False


def _get_pool() -> _SessionPool:
    """This process's pool, created on first use (a forked child gets its own)."""
    global _pool, _atexit_registered
    with _pool_lock:
        if _pool is None or _pool.pid != os.getpid():
            _pool = _SessionPool()
            if not _atexit_registered:
                atexit.register(close_all_sessions)
                _atexit_registered = True
        return _pool


def run_blocking(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run `coroutine` on the MCP session loop and wait for its result (for sync callers, from any thread)."""
    return _get_pool().run_sync(coroutine)


def close_all_sessions() -> None:
    """Stop every MCP server session of this process (they restart on the next call). Runs at exit."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None and pool.pid == os.getpid():
        pool.shutdown()


# ------------------------------------------------------------------------------------------- tool group


class MCPToolGroup(ToolGroup):
    """The tools of one MCP server as a skyrl-gym `ToolGroup` (named after the server).

    Args:
        spec: the server (`MCPServerSpec`, or anything `MCPServerSpec.from_config` takes, e.g. a bundled name).
        call_timeout_s: per-call timeout.
        max_output_chars: longer tool outputs are truncated with a marker.
        allowed_tools: only these tools are listed and callable (None: all the server's tools).
        retries: extra attempts to start/connect the server, with exponential backoff.
        connect_timeout_s: limit for starting the server and its handshake.
    """

    def __init__(
        self,
        spec: MCPServerSpec | str,
        *,
        call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        allowed_tools: Iterable[str] | None = None,
        retries: int = DEFAULT_RETRIES,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
    ):
        self.spec = spec if isinstance(spec, MCPServerSpec) else MCPServerSpec.from_config(spec, spec)
        super().__init__(name=self.spec.name)
        for key, value in (("call_timeout_s", call_timeout_s), ("connect_timeout_s", connect_timeout_s)):
            if not value > 0:
                raise ValueError(f"{key} must be > 0, got {value!r}")
        if int(max_output_chars) < 1:
            raise ValueError(f"max_output_chars must be >= 1, got {max_output_chars!r}")
        if int(retries) < 0:
            raise ValueError(f"retries must be >= 0, got {retries!r}")
        self.call_timeout_s = float(call_timeout_s)
        self.max_output_chars = int(max_output_chars)
        self.allowed_tools = None if allowed_tools is None else frozenset(allowed_tools)
        self.retries = int(retries)
        self.connect_timeout_s = float(connect_timeout_s)
        self._tools: list[dict[str, Any]] | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"MCPToolGroup({self.spec!r})"

    # ---------------------------------------------------------------------------------- public API

    def list_tools(self) -> list[dict[str, Any]]:
        """The (allowed) tools in MCP form: ``{"name", "description", "inputSchema"}``; raises `MCPServerError`."""
        pool = self._pool()
        return pool.run_sync(self._list_tools(pool))

    async def list_tools_async(self) -> list[dict[str, Any]]:
        pool = self._pool()
        return await pool.run_async(self._list_tools(pool))

    def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> ToolResult:
        """Call tool `name`; never raises for tool or server failures (see `ToolResult.error_kind`)."""
        pool = self._pool()
        return pool.run_sync(self._call_tool(pool, name, dict(arguments or {})))

    async def call_tool_async(self, name: str, arguments: dict[str, Any] | None = None) -> ToolResult:
        pool = self._pool()
        return await pool.run_async(self._call_tool(pool, name, dict(arguments or {})))

    def close(self) -> None:
        """Release this group. The pooled server session stays up for the next episode."""
        self._closed = True

    # ------------------------------------------------------------------------- skyrl-gym ToolGroup API

    def get_tool_names(self) -> list[str]:
        return [tool["name"] for tool in self._cached_tools()]

    def get_tool(self, name: str) -> Callable[..., ToolResult] | None:
        return functools.partial(self.call_tool, name) if name in self.get_tool_names() else None

    def execute_tool(self, name: str, arguments: dict[str, Any] | None = None) -> ToolResult:
        return self.call_tool(name, arguments)

    def get_tool_to_group_mapping(self) -> dict[str, str]:
        return {name: self.name for name in self.get_tool_names()}

    # ----------------------------------------------------------------------------------- internals

    def _pool(self) -> _SessionPool:
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")
        return _get_pool()

    def _cached_tools(self) -> list[dict[str, Any]]:
        return self._tools if self._tools is not None else self.list_tools()

    def _allowed(self, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [t for t in tools if self.allowed_tools is None or t["name"] in self.allowed_tools]

    async def _list_tools(self, pool: _SessionPool) -> list[dict[str, Any]]:
        """Fresh tool listing; doubles as a liveness check of a reused session (a dead one is replaced)."""

        async def listing() -> list[dict[str, Any]]:
            connection, fresh = await pool.connection(self.spec, self.connect_timeout_s)
            if fresh:
                return connection.tools
            try:
                connection.tools = await connection.request(_list_all_tools, self.call_timeout_s)
            except Exception:
                pool.discard(connection)
                raise
            return connection.tools

        self._tools = self._allowed(await self._with_retries(listing))
        return self._tools

    async def _connection(self, pool: _SessionPool) -> _Connection:
        return (await self._with_retries(lambda: pool.connection(self.spec, self.connect_timeout_s)))[0]

    async def _with_retries(self, attempt: Callable[[], Coroutine[Any, Any, T]]) -> T:
        last: BaseException | None = None
        for i in range(self.retries + 1):
            if i:
                await asyncio.sleep(RETRY_BACKOFF_S * 2 ** (i - 1))
            try:
                return await attempt()
            except Exception as exc:
                last = exc
                logger.warning(
                    "MCP server %r: attempt %d/%d failed: %s", self.name, i + 1, self.retries + 1, _describe(exc)
                )
        raise MCPServerError(
            f"MCP server {self.spec!r} could not be reached after {self.retries + 1} attempt(s): {_describe(last)}"
        ) from last

    async def _call_tool(self, pool: _SessionPool, name: str, arguments: dict[str, Any]) -> ToolResult:
        if self.allowed_tools is not None and name not in self.allowed_tools:
            allowed = sorted(self.allowed_tools)
            return ToolResult(f"Tool {name!r} is not allowed here. Allowed tools: {allowed}", True, "not_allowed")
        try:
            connection = await self._connection(pool)
        except MCPServerError as exc:
            return ToolResult(
                f"The tool server {self.name!r} is unavailable: {_describe(exc.__cause__)}", True, "server_crashed"
            )
        known = [t["name"] for t in self._allowed(connection.tools)]
        if name not in known:
            return ToolResult(f"Unknown tool {name!r}. Available tools: {known}", True, "unknown_tool")

        def call(client: Client):
            return client.call_tool(name, arguments, read_timeout_seconds=self.call_timeout_s)

        try:
            result = await connection.request(call, self.call_timeout_s + CALL_GRACE_S)
        except TimeoutError:
            return await self._timed_out(pool, connection, name)
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                return await self._timed_out(pool, connection, name)
            if exc.code == CONNECTION_CLOSED:
                return self._crashed(pool, connection, name, exc)
            return ToolResult(f"Tool {name!r} failed: {exc.message}", True, "tool_error")
        except Exception as exc:
            if not connection.alive:
                return self._crashed(pool, connection, name, exc)
            # The session is still up (e.g. a malformed result): the call failed, the server did not.
            return ToolResult(f"Tool {name!r} failed: {_describe(exc)}", True, "tool_error")
        text, truncated = truncate_output(result_text(result), self.max_output_chars)
        return ToolResult(text, bool(result.is_error), "tool_error" if result.is_error else None, truncated)

    async def _timed_out(self, pool: _SessionPool, connection: _Connection, name: str) -> ToolResult:
        if not await connection.responsive():
            logger.warning("MCP server %r: unresponsive after %r timed out; restarting it", self.name, name)
            pool.discard(connection)
        return ToolResult(f"Tool {name!r} timed out after {self.call_timeout_s:g}s.", True, "timeout")

    def _crashed(self, pool: _SessionPool, connection: _Connection, name: str, exc: BaseException) -> ToolResult:
        logger.warning("MCP server %r: connection lost during %r: %s", self.name, name, _describe(exc))
        pool.discard(connection)
        return ToolResult(
            f"Tool {name!r} failed: the tool server {self.name!r} stopped responding (it will be restarted).",
            True,
            "server_crashed",
        )


# ------------------------------------------------------------------------------------------------ output


def result_text(result: Any) -> str:
    """The text of a ``tools/call`` result: its content blocks joined by newlines (non-text blocks become short
    placeholders); the structured content as JSON when there are no blocks."""
    parts = []
    for block in result.content or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource" and getattr(block.resource, "text", None) is not None:
            parts.append(block.resource.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind}: {getattr(block, 'mime_type', 'unknown type')}]")
        else:
            parts.append(f"[{kind or type(block).__name__}: {getattr(block, 'uri', '') or 'no text'}]")
    if not parts and result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False)
    return "\n".join(parts)


def truncate_output(text: str, max_chars: int) -> tuple[str, bool]:
    """`text` cut to `max_chars` characters plus a marker naming both lengths; `(text, truncated)`."""
    if len(text) <= max_chars:
        return text, False
    return f"{text[:max_chars]}\n...[truncated {len(text)} -> {max_chars} chars]", True


def _describe(exc: BaseException | None) -> str:
    """A one-line description; exception groups (anyio task groups) are unwrapped to their leaves."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
