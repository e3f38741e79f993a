"""`EpisodeToolkit`: one episode's in-process tau2 tools over its own copy of the domain DB.

Reset is free: an episode starts on the shared pristine DB and deep-copies it right before its first write tool
(tau2 types every tool READ / WRITE / GENERIC / THINK, and only WRITE tools change the DB). Episodes that only
read never copy, and their DB hash is the cached pristine hash. Tool outputs are rendered exactly as the official
tau2 `Environment` renders them: the JSON of the result, or ``"Error: <message>"`` with the error flag set.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from skyrl_integrations.tau_bench.domains import Domain, get_domain


@dataclasses.dataclass(frozen=True)
class ToolOutput:
    content: str
    error: bool


class EpisodeToolkit:
    """The agent's tools of `domain` for one episode. `call` never raises: failures come back as error outputs."""

    def __init__(self, domain: Domain):
        from tau2.environment.environment import Environment
        from tau2.environment.toolkit import ToolType

        self.domain = domain
        self._write = ToolType.WRITE
        self._tools = domain.make_toolkit(domain.pristine_db)
        self._environment = Environment(domain_name=domain.name, policy=domain.policy, tools=self._tools)
        self.copied = False
        """Whether this episode has its own DB yet (it gets one right before its first write tool)."""

    def call(self, name: str, arguments: Mapping[str, Any]) -> ToolOutput:
        from tau2.data_model.message import ToolCall

        if not self.copied and self._tools.has_tool(name) and self._tools.tool_type(name) is self._write:
            self._tools.db = self.domain.pristine_db.model_copy(deep=True)
            self.copied = True
        message = self._environment.get_response(ToolCall(name=name, arguments=dict(arguments)))
        return ToolOutput(message.content, bool(message.error))

    def db_hash(self) -> str:
        """tau2's hash of this episode's DB."""
        return self._tools.get_db_hash() if self.copied else self.domain.pristine_hash


def gold_db_hash(domain: Domain, actions: Sequence[Mapping[str, Any]]) -> str:
    """The DB hash after replaying gold `actions` (``{"name", "arguments"}``) on a fresh DB; tool errors are ignored,
    as in tau2's evaluator. Cached per (domain, actions): a replay plus hash costs ~0.1-0.3 s."""
    return _gold_db_hash(domain.name, json.dumps([[a["name"], a["arguments"]] for a in actions], sort_keys=True))


@functools.lru_cache(maxsize=4096)
def _gold_db_hash(domain_name: str, actions_json: str) -> str:
    toolkit = EpisodeToolkit(get_domain(domain_name))
    for name, arguments in json.loads(actions_json):
        toolkit.call(name, arguments)
    return toolkit.db_hash()
