"""`EpisodeToolkit`: one episode's in-process tau2 tools over its own copy of the domain DB.

Reset is free: an episode starts on the shared pristine DB and deep-copies it right before its first write tool
(tau2 types every tool READ / WRITE / GENERIC / THINK, and only WRITE tools change the DB). Episodes that only
read never copy, and their DB hash is the cached pristine hash. Every call is answered by the official tau2
`Environment`, as tau2 answers it: the JSON of the result, or ``"Error: <message>"`` with the error flag set (an
unknown tool name, an argument the tool does not take, a refused write).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from skyrl_integrations.tau_bench.domains import Domain


class EpisodeToolkit:
    """The agent's tools of `domain` for one episode. Calls never raise: failures come back as error messages."""

    def __init__(self, domain: Domain):
        from tau2.environment.environment import Environment
        from tau2.environment.toolkit import ToolType

        self.domain = domain
        self._write = ToolType.WRITE
        self._tools = domain.make_toolkit(domain.pristine_db)
        self._environment = Environment(domain_name=domain.name, policy=domain.policy, tools=self._tools)
        self.copied = False
        """Whether this episode has its own DB yet (it gets one right before its first write tool)."""

    def respond(self, tool_call: Any) -> Any:
        """tau2's `ToolMessage` answering `tool_call` (a `tau2.data_model.message.ToolCall`), exactly as written."""
        name = tool_call.name
        if not self.copied and self._tools.has_tool(name) and self._tools.tool_type(name) is self._write:
            self._tools.db = self.domain.pristine_db.model_copy(deep=True)
            self.copied = True
        return self._environment.get_response(tool_call)

    def call(self, name: str, arguments: Mapping[str, Any]) -> Any:
        """`respond` to a call of tool `name` with `arguments`."""
        from tau2.data_model.message import ToolCall

        return self.respond(ToolCall(name=name, arguments=dict(arguments)))

    def db_hash(self) -> str:
        """tau2's hash of this episode's DB."""
        return self._tools.get_db_hash() if self.copied else self.domain.pristine_hash
