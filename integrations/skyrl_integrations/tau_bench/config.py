"""`TauBenchEnvConfig`: the ``environment.skyrl_gym.tau_bench`` block, validated (an unknown key is an error naming
it), and the user simulator it describes.

Keys (all optional):

- ``max_turns`` (30): agent turns per episode (tau-bench v1's agent-action cap); the generator's ``max_turns``,
  when smaller, wins. Reaching it ends the episode with reward 0.
- ``max_tool_errors`` (10): tool calls answered with an error before the episode ends with reward 0 (tau2's cap).
- ``transfer_ends_episode`` (true): a ``transfer_to_human_agents`` call ends the episode, which is then graded
  (tau-bench v1); false keeps going until the user stops (tau2).
- ``repair_calls`` (false): false runs each tool call exactly as written, as official tau2 does: a tool name in
  another case or with a namespace prefix (``functions.``), or an argument under another name (``id`` for
  ``user_id``), is answered with tau2's own error (``Tool '...' not found.``, ``... got an unexpected keyword
  argument ...``), so what scores here scores on tau2. true repairs such calls against the tool's schema first, as
  the project's tool-call parser does (name case, separators and prefixes; renamed arguments; numbers or JSON
  written as strings), and counts each repaired call (metric ``repaired_calls``): rewards then overstate tau2's.
- ``include_policy`` (true): false leaves the domain policy out of the system prompt, to fit a small model's context
  on CPU. The policy is what the agent must follow: published tau-bench numbers always include it.
- ``tool_prompt`` ("full"): "full" (each official JSON schema) or "compact" (one line per tool, for small models).
- ``demonstrations`` ([]): chat messages inserted after the system prompt (a list, or a path to a JSON file).
- ``user``: the user simulator, ``{kind: scripted, opening?, replies?}`` (default ``{kind: scripted}``: the task
  instruction as the opening, then ``###STOP###``) or ``{kind: llm, base_url, model, api_key?, strategy?,
  temperature?, max_tokens?, timeout_s?, prompt_price_per_1k_tokens?, completion_price_per_1k_tokens?}``.
  ``api_key`` defaults to the ``OPENAI_API_KEY`` environment variable, else "EMPTY" (local servers ignore it).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from skyrl_gym.common.config import to_plain
from skyrl_integrations.mcp.config import _load_json_file
from skyrl_integrations.mcp.prompt import TOOL_PROMPT_STYLES, validate_demonstrations
from skyrl_integrations.tau_bench.users import STRATEGIES, LLMUser, LLMUserConfig, ScriptedUser, UserSimulator

WHERE = "environment.skyrl_gym.tau_bench"
USER_KINDS = ("scripted", "llm")
_SCRIPTED_KEYS = {"kind", "opening", "replies"}


@dataclasses.dataclass(frozen=True)
class TauBenchEnvConfig:
    max_turns: int = 30
    max_tool_errors: int = 10
    transfer_ends_episode: bool = True
    repair_calls: bool = False
    include_policy: bool = True
    tool_prompt: str = "full"
    demonstrations: tuple[dict[str, str], ...] = ()
    user: dict[str, Any] = dataclasses.field(default_factory=lambda: {"kind": "scripted"})

    @classmethod
    def from_env_config(cls, env_config: Any) -> TauBenchEnvConfig:
        raw = to_plain(env_config) or {}
        if not isinstance(raw, Mapping):
            raise ValueError(f"{WHERE}: expected a mapping, got {type(raw).__name__}")
        _reject_unknown(raw, {f.name for f in dataclasses.fields(cls)}, WHERE)
        values = {k: v for k, v in raw.items() if v is not None}
        if "demonstrations" in values:
            values["demonstrations"] = _demonstrations(values["demonstrations"])
        if "user" in values:
            values["user"] = dict(to_plain(values["user"]) or {})
        config = cls(**values)
        config._validate()
        return config

    def _validate(self) -> None:
        for key in ("max_turns", "max_tool_errors"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{WHERE}.{key}: must be an int >= 1, got {value!r}")
        for key in ("transfer_ends_episode", "repair_calls", "include_policy"):
            if not isinstance(getattr(self, key), bool):
                raise ValueError(f"{WHERE}.{key}: must be true or false, got {getattr(self, key)!r}")
        if self.tool_prompt not in TOOL_PROMPT_STYLES:
            raise ValueError(f"{WHERE}.tool_prompt: expected one of {TOOL_PROMPT_STYLES}, got {self.tool_prompt!r}")
        kind = self.user.get("kind", "scripted")
        if kind not in USER_KINDS:
            raise ValueError(f"{WHERE}.user.kind: expected one of {list(USER_KINDS)}, got {kind!r}")
        self._user_fields(kind)

    def make_user(self, instruction: str) -> UserSimulator:
        """The configured user simulator for a task whose scenario is `instruction`."""
        kind = self.user.get("kind", "scripted")
        fields = self._user_fields(kind)
        if kind == "scripted":
            return ScriptedUser(fields.get("opening") or instruction, fields.get("replies") or ())
        return LLMUser(LLMUserConfig(**fields), instruction)

    def _user_fields(self, kind: str) -> dict[str, Any]:
        fields = {k: v for k, v in self.user.items() if k != "kind"}
        allowed = (
            _SCRIPTED_KEYS if kind == "scripted" else {"kind", *(f.name for f in dataclasses.fields(LLMUserConfig))}
        )
        unknown = sorted(set(fields) - allowed)
        if unknown:
            raise ValueError(f"{WHERE}.user: unknown key(s) {unknown} for kind {kind!r}; allowed: {sorted(allowed)}")
        if kind == "scripted":
            replies = fields.get("replies", [])
            if isinstance(replies, str) or not all(isinstance(r, str) for r in replies):
                raise ValueError(f"{WHERE}.user.replies: expected a list of strings, got {replies!r}")
            return fields
        missing = [key for key in ("base_url", "model") if not fields.get(key)]
        if missing:
            raise ValueError(f"{WHERE}.user: kind 'llm' needs {missing}")
        if fields.get("strategy", "llm") not in STRATEGIES:
            raise ValueError(f"{WHERE}.user.strategy: expected one of {list(STRATEGIES)}, got {fields['strategy']!r}")
        fields.setdefault("api_key", os.environ.get("OPENAI_API_KEY") or "EMPTY")
        return fields


def _reject_unknown(block: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(block) - allowed)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(allowed)}")


def _demonstrations(value: Any) -> tuple[dict[str, str], ...]:
    """The demonstrations: a list of chat messages, or the path of a JSON file holding one."""
    where = f"{WHERE}.demonstrations"
    if isinstance(value, str):
        where = f"{where} ({value})"
        value = _load_json_file(value, where)
    return tuple(validate_demonstrations(value, where))
