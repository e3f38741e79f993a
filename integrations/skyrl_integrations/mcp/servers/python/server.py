"""The python MCP server: ``run_python`` over ``skyrl_gym.tools.python.execute_python``.

Limits come from the environment at start-up (MCP client configs pass environment variables to servers; the common
command line of the bundled servers is the same for all of them):

- ``SKYRL_PYTHON_TIMEOUT_S`` (10): default and maximum wall-clock seconds of one call.
- ``SKYRL_PYTHON_MEMORY_MB`` (512): address-space limit of the program.
- ``SKYRL_PYTHON_MAX_OUTPUT_CHARS`` (2000): characters kept of stdout (its head) and of stderr (its tail).
- ``SKYRL_PYTHON_ALLOW_NETWORK`` (``0``): ``1`` gives programs the host's network. By default they have none: a
  network namespace whose only device is a loopback that is down, plus an audit hook that refuses Python-level
  networking with a clear error.
- ``SKYRL_PYTHON_UNSAFE_NO_SANDBOX`` (``0``): ``1`` runs programs without the sandbox, as the server's user with that
  user's files (home folder, credentials, checkpoints), for machines that cannot create user namespaces.

Programs run in ``skyrl_gym.tools.sandbox``'s sandbox: their own filesystem view (system folders and the Python
installation read-only, an empty temporary working folder the only writable one; no home folder, repository or
checkpoints) and their own processes. The server checks at start-up that this machine can run it, and refuses to
start with ``SandboxUnavailableError`` naming what is missing otherwise.

The tool's result is JSON ``{"exit_code", "stdout", "stderr"}`` plus ``"error"`` when the sandbox stopped the program
(time, memory, CPU, signal). It is marked ``isError`` whenever the program did not exit with status 0, so failing code
counts as a failed tool call; the JSON still carries everything the model needs to fix it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Annotated

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from skyrl_gym.tools.python import PythonExecution, execute_python
from skyrl_gym.tools.sandbox import require_sandbox

from .._common import LiveModeError, Mode, ToolError, to_json

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SandboxConfig:
    """The limits of every ``run_python`` call (see the module docstring for the environment variables)."""

    timeout_s: float = 10.0
    memory_mb: int = 512
    max_output_chars: int = 2000
    allow_network: bool = False
    unsafe_no_sandbox: bool = False

    @classmethod
    def from_env(cls) -> SandboxConfig:
        """Read the ``SKYRL_PYTHON_*`` variables; a bad value raises ``ValueError`` naming the variable."""
        defaults = cls()
        return cls(
            timeout_s=_positive_env("SKYRL_PYTHON_TIMEOUT_S", float, defaults.timeout_s),
            memory_mb=_positive_env("SKYRL_PYTHON_MEMORY_MB", int, defaults.memory_mb),
            max_output_chars=_positive_env("SKYRL_PYTHON_MAX_OUTPUT_CHARS", int, defaults.max_output_chars),
            allow_network=_flag_env("SKYRL_PYTHON_ALLOW_NETWORK"),
            unsafe_no_sandbox=_flag_env("SKYRL_PYTHON_UNSAFE_NO_SANDBOX"),
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


def _flag_env(name: str) -> bool:
    raw = os.environ.get(name, "0")
    if raw not in ("0", "1"):
        raise ValueError(f"{name}={raw!r}: use 0 or 1")
    return raw == "1"


def build_server(mode: Mode) -> MCPServer:
    """The python server configured from ``SKYRL_PYTHON_*``; it has no live mode. Raises
    ``SandboxUnavailableError`` when this machine cannot run the sandbox (unless ``SKYRL_PYTHON_UNSAFE_NO_SANDBOX``)."""
    if mode == "live":
        raise LiveModeError("the python server has no live mode (it calls no outside API); run it with --mode offline")
    config = SandboxConfig.from_env()
    if config.unsafe_no_sandbox:
        logger.warning(
            "SKYRL_PYTHON_UNSAFE_NO_SANDBOX=1: programs run without the sandbox, as this user, with read and write "
            "access to this user's files (home folder, credentials, checkpoints)"
        )
    else:
        require_sandbox(config.allow_network)
    return create_server(config)


def create_server(config: SandboxConfig) -> MCPServer:
    network = "the host's network" if config.allow_network else "no network"
    limits = (
        f"at most {config.timeout_s:g} s wall clock, {config.memory_mb} MB memory, {network}, an empty temporary "
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
                allow_network=config.allow_network,
                unsafe_no_sandbox=config.unsafe_no_sandbox,
            )
        except OSError as exc:  # no process slots, disk full: the server itself is in trouble
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
