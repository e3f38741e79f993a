"""The python MCP server: ``run_python`` over ``skyrl_gym.tools.python.execute_python``.

Limits come from the environment at start-up (MCP client configs pass environment variables to servers; the common
command line of the bundled servers is the same for all of them):

- ``SKYRL_PYTHON_TIMEOUT_S`` (10): default and maximum wall-clock seconds of one call.
- ``SKYRL_PYTHON_MEMORY_MB`` (512): address-space limit of the program.
- ``SKYRL_PYTHON_MAX_OUTPUT_CHARS`` (2000): characters kept of stdout (its head) and of stderr (its tail).
- ``SKYRL_PYTHON_NETWORK_ISOLATION`` (``auto``): the child always gets an audit hook that refuses internet sockets,
  connect/bind and name lookups, which stops Python-level networking. ``namespace`` also runs it in a new network
  namespace (``unshare --user --map-root-user --net``: only a loopback device that is down), which native code and
  child processes cannot get around, and refuses to start where the kernel does not allow that; ``auto`` uses the
  namespace when available and otherwise logs a warning at start-up; ``audit`` uses the hook alone.

The tool's result is JSON ``{"exit_code", "stdout", "stderr"}`` plus ``"error"`` when the sandbox stopped the program
(time, memory, CPU, signal). It is marked ``isError`` whenever the program did not exit with status 0, so failing code
counts as a failed tool call; the JSON still carries everything the model needs to fix it.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Annotated, Literal

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from skyrl_gym.tools.python import PythonExecution, execute_python

from .._common import LiveModeError, Mode, ToolError, to_json

logger = logging.getLogger(__name__)
NetworkIsolation = Literal["auto", "namespace", "audit"]
_UNSHARE_ARGS = ("--user", "--map-root-user", "--net")


@dataclass(frozen=True)
class SandboxConfig:
    """The limits of every ``run_python`` call (see the module docstring for the environment variables)."""

    timeout_s: float = 10.0
    memory_mb: int = 512
    max_output_chars: int = 2000
    network_isolation: NetworkIsolation = "auto"

    @classmethod
    def from_env(cls) -> SandboxConfig:
        """Read the ``SKYRL_PYTHON_*`` variables; a bad value raises ``ValueError`` naming the variable."""
        defaults = cls()
        isolation = os.environ.get("SKYRL_PYTHON_NETWORK_ISOLATION", defaults.network_isolation)
        if isolation not in ("auto", "namespace", "audit"):
            raise ValueError(f"SKYRL_PYTHON_NETWORK_ISOLATION={isolation!r}: use auto, namespace or audit")
        return cls(
            timeout_s=_positive_env("SKYRL_PYTHON_TIMEOUT_S", float, defaults.timeout_s),
            memory_mb=_positive_env("SKYRL_PYTHON_MEMORY_MB", int, defaults.memory_mb),
            max_output_chars=_positive_env("SKYRL_PYTHON_MAX_OUTPUT_CHARS", int, defaults.max_output_chars),
            network_isolation=isolation,
        )


def _positive_env(name: str, kind: type, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a valid {kind.__name__}") from None
    if value <= 0:
        raise ValueError(f"{name}={raw!r} must be positive")
    return value


def namespace_launcher() -> tuple[list[str] | None, str]:
    """``(unshare command prefix, "")`` if this machine lets us create a network namespace, else ``(None, why not)``."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None, "the unshare command (util-linux) is not installed"
    try:
        probe = subprocess.run([unshare, *_UNSHARE_ARGS, "true"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"unshare could not run ({exc})"
    if probe.returncode != 0:
        return None, f"unshare was refused ({probe.stderr.strip() or f'exit status {probe.returncode}'})"
    return [unshare, *_UNSHARE_ARGS], ""


def _launcher_for(isolation: NetworkIsolation) -> list[str]:
    if isolation == "audit":
        return []
    launcher, reason = namespace_launcher()
    if launcher is not None:
        return launcher
    if isolation == "namespace":
        raise ValueError(f"SKYRL_PYTHON_NETWORK_ISOLATION=namespace, but no network namespace is available: {reason}")
    logger.warning(
        "no network namespace (%s): only Python-level networking is blocked, so native code or child processes "
        "could still reach the network. Set SKYRL_PYTHON_NETWORK_ISOLATION=namespace to require the namespace.",
        reason,
    )
    return []


def build_server(mode: Mode) -> MCPServer:
    """The python server configured from ``SKYRL_PYTHON_*``; it has no live mode."""
    if mode == "live":
        raise LiveModeError("the python server has no live mode (it calls no outside API); run it with --mode offline")
    config = SandboxConfig.from_env()
    return create_server(config, launcher=_launcher_for(config.network_isolation))


def create_server(config: SandboxConfig, launcher: list[str]) -> MCPServer:
    limits = (
        f"at most {config.timeout_s:g} s wall clock, {config.memory_mb} MB memory, no network, an empty temporary "
        "working directory, no stdin; nothing carries over between calls"
    )
    server = MCPServer("python", instructions=f"Runs Python 3 programs in a fresh sandbox per call: {limits}.")

    @server.tool(
        structured_output=False,
        description=(
            f"Run a Python 3 program and return its exit code, stdout and stderr as JSON. Limits: {limits}. "
            "Print the values you need."
        ),
    )
    def run_python(
        code: Annotated[str, Field(description="the complete program to run")],
        timeout_s: Annotated[
            float | None,
            Field(description="seconds before the program is killed (default and maximum: the server's limit)"),
        ] = None,
    ) -> CallToolResult:
        if timeout_s is not None and timeout_s <= 0:
            raise ToolError(f"timeout_s must be positive, got {timeout_s:g}")
        try:
            execution = execute_python(
                code,
                timeout=min(timeout_s or config.timeout_s, config.timeout_s),
                memory_limit_mb=config.memory_mb,
                max_output_chars=config.max_output_chars,
                block_network=True,
                launcher=launcher,
            )
        except OSError as exc:  # no process slots, disk full, launcher missing: the server itself is in trouble
            raise ToolError(f"could not start the Python interpreter ({exc})") from None
        return _result(execution)

    return server


def _result(execution: PythonExecution) -> CallToolResult:
    payload: dict[str, object] = {
        "exit_code": execution.returncode,
        "stdout": execution.stdout,
        "stderr": execution.stderr,
    }
    if execution.returncode != 0 and execution.failure is not None:
        payload["error"] = execution.failure
    return CallToolResult(
        content=[TextContent(type="text", text=to_json(payload))],
        is_error=execution.returncode != 0,
    )
