"""`Trajectory`: one episode as tau2 messages, in order, the form tau2's evaluators grade.

It starts as tau2's orchestrator starts a conversation (the agent's fixed greeting, then the user's opening line).
An agent turn is either a text message to the user or one tool call (tau2 keeps any text of that reply on the same
message, where it still counts for COMMUNICATE) followed by the tool's answer; user replies follow agent messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from skyrl_integrations.tau_bench.toolkit import EpisodeToolkit
from skyrl_integrations.tau_bench.users import GREETING


class Trajectory:
    """The messages of one episode (`messages`: tau2 `AssistantMessage` / `UserMessage` / `ToolMessage`)."""

    def __init__(self, user_opening: str):
        from tau2.data_model.message import AssistantMessage, UserMessage

        self.messages: list[Any] = [
            AssistantMessage(role="assistant", content=GREETING),
            UserMessage(role="user", content=user_opening),
        ]

    def agent_says(self, text: str) -> None:
        from tau2.data_model.message import AssistantMessage

        self.messages.append(AssistantMessage(role="assistant", content=text))

    def user_says(self, text: str) -> None:
        from tau2.data_model.message import UserMessage

        self.messages.append(UserMessage(role="user", content=text))

    def agent_calls(self, toolkit: EpisodeToolkit, name: str, arguments: Mapping[str, Any], text: str) -> Any:
        """Run the agent's call of tool `name` on `toolkit` and record it (with the reply's `text`, if any) and its
        answer; returns the answer, tau2's `ToolMessage`."""
        from tau2.data_model.message import AssistantMessage, ToolCall

        call = ToolCall(id=f"call_{len(self.messages)}", name=name, arguments=dict(arguments), requestor="assistant")
        answer = toolkit.respond(call)
        self.messages += [AssistantMessage(role="assistant", content=text or None, tool_calls=[call]), answer]
        return answer
