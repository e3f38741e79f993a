"""User simulators behind one interface: `opening()` answers the agent's fixed greeting, `reply(text)` answers each
agent message. A reply containing a stop token (`STOP_TOKENS`) ends the episode.

- `ScriptedUser` (``kind: scripted``): deterministic, for tests and CI. It opens with the task's instruction (or a
  configured opening), answers agent messages with its configured replies in order, then says ``###STOP###``.
- `LLMUser` (``kind: llm``): any OpenAI-compatible chat endpoint (OpenAI, vLLM, ``python -m skyrl_train.serve``),
  prompted with tau2's user-simulation guidelines and the task scenario, conversation roles flipped. Strategies:
  ``llm`` (one call per turn), ``react`` (the model writes ``Thought:`` then ``User Response:``; only the response
  is sent), ``verify`` (up to `VERIFY_ATTEMPTS` samples, each checked by a supervisor call; the first judged valid
  is kept, else the last), ``reflection`` (one sample, verified; if invalid, the model reflects and rewrites it,
  up to `REFLECTION_ATTEMPTS` times; if nothing verifies, the first sample is kept).

Endpoint failures raise `UserSimulatorError`: the env ends the episode as an infrastructure failure, not a task
failure. Each turn reports its wall-clock latency, token usage and cost (from the configured per-token prices).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from importlib import resources
from typing import Any, Protocol

GREETING = "Hi! How can I help you today?"
"""tau2's fixed first agent message; the user simulator's first turn answers it."""
STOP_TOKENS = ("###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###")
STRATEGIES = ("llm", "react", "verify", "reflection")
VERIFY_ATTEMPTS = 3
REFLECTION_ATTEMPTS = 2


class UserSimulatorError(RuntimeError):
    """The user simulator's endpoint failed (connection, HTTP error, timeout, empty answer)."""


@dataclasses.dataclass(frozen=True)
class UserTurn:
    text: str
    latency_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0


class UserSimulator(Protocol):
    def opening(self) -> UserTurn: ...

    def reply(self, agent_message: str) -> UserTurn: ...


def stop_token(text: str) -> str | None:
    """The first stop token contained in `text`, if any (tau2 detects them by substring)."""
    return next((token for token in STOP_TOKENS if token in text), None)


class ScriptedUser:
    """Deterministic user: `opening`, then `replies` in order, then ``###STOP###`` for every later message."""

    def __init__(self, opening: str, replies: Sequence[str] = ()):
        self._opening = opening
        self._replies = list(replies)
        self._next = 0

    def opening(self) -> UserTurn:
        return UserTurn(self._opening)

    def reply(self, agent_message: str) -> UserTurn:
        if self._next < len(self._replies):
            self._next += 1
            return UserTurn(self._replies[self._next - 1])
        return UserTurn(STOP_TOKENS[0])


@dataclasses.dataclass(frozen=True)
class LLMUserConfig:
    base_url: str
    model: str
    api_key: str = dataclasses.field(default="EMPTY", repr=False)
    """Sent to `base_url` only; left out of ``repr`` so that a logged config or error never shows it."""
    strategy: str = "llm"
    temperature: float = 0.0
    max_tokens: int = 256
    timeout_s: float = 60.0
    prompt_price_per_1k_tokens: float = 0.0
    completion_price_per_1k_tokens: float = 0.0


class LLMUser:
    """A user played by a chat model behind an OpenAI-compatible endpoint (see the module doc for strategies)."""

    def __init__(self, config: LLMUserConfig, instruction: str, client: Any = None):
        from openai import OpenAI

        if config.strategy not in STRATEGIES:
            raise ValueError(f"user.strategy: expected one of {list(STRATEGIES)}, got {config.strategy!r}")
        self.config = config
        self.client = client or OpenAI(
            base_url=config.base_url, api_key=config.api_key, timeout=config.timeout_s, max_retries=1
        )
        self.system = _system_prompt(instruction, react=config.strategy == "react")
        self.history: list[dict[str, str]] = []
        """The conversation from the simulator's side: agent messages as ``user``, its own as ``assistant``."""
        self._usage = _Usage()

    def opening(self) -> UserTurn:
        return self.reply(GREETING)

    def reply(self, agent_message: str) -> UserTurn:
        self._usage = _Usage()
        started = time.perf_counter()
        self.history.append({"role": "user", "content": agent_message})
        text = {"llm": self._plain, "react": self._react, "verify": self._verified, "reflection": self._reflected}[
            self.config.strategy
        ]()
        self.history.append({"role": "assistant", "content": text})
        prices = (self.config.prompt_price_per_1k_tokens, self.config.completion_price_per_1k_tokens)
        cost = (self._usage.prompt * prices[0] + self._usage.completion * prices[1]) / 1000
        return UserTurn(text, time.perf_counter() - started, self._usage.prompt, self._usage.completion, cost)

    # ------------------------------------------------------------------------------------- strategies

    def _plain(self) -> str:
        return self._complete([{"role": "system", "content": self.system}, *self.history])

    def _react(self) -> str:
        raw = self._plain()
        token = stop_token(raw)
        if token is not None:
            return token
        _, marker, response = raw.rpartition("User Response:")
        return (response if marker else raw).strip()

    def _verified(self) -> str:
        candidate = ""
        for _ in range(VERIFY_ATTEMPTS):
            candidate = self._plain()
            if self._judged_valid(candidate):
                break
        return candidate

    def _reflected(self) -> str:
        first = candidate = self._plain()
        for _ in range(REFLECTION_ATTEMPTS):
            if self._judged_valid(candidate):
                return candidate
            candidate = self._complete(
                [
                    {"role": "system", "content": self.system},
                    *self.history,
                    {"role": "assistant", "content": candidate},
                    {"role": "user", "content": REFLECTION_PROMPT},
                ]
            )
        return candidate if self._judged_valid(candidate) else first

    def _judged_valid(self, candidate: str) -> bool:
        transcript = "\n".join(
            f"{'Agent' if m['role'] == 'user' else 'Customer'}: {m['content']}" for m in self.history
        )
        verdict = self._complete(
            [
                {"role": "system", "content": SUPERVISOR_PROMPT},
                {
                    "role": "user",
                    "content": f"{self.system}\n\nConversation so far:\n{transcript}\n\n"
                    f"Candidate customer response:\n{candidate}\n\nAnswer true or false.",
                },
            ]
        )
        return "true" in verdict.lower()

    # ------------------------------------------------------------------------------------- endpoint

    def _complete(self, messages: list[dict[str, str]]) -> str:
        import openai

        try:
            response = self.client.chat.completions.create(
                model=self.config.model,
                messages=messages,
                temperature=self.config.temperature,
                max_tokens=self.config.max_tokens,
            )
        except openai.OpenAIError as error:
            raise UserSimulatorError(f"user simulator endpoint {self.config.base_url}: {error}") from error
        if not response.choices or response.choices[0].message.content is None:
            raise UserSimulatorError(f"user simulator endpoint {self.config.base_url}: empty answer")
        if response.usage is not None:
            self._usage.prompt += response.usage.prompt_tokens or 0
            self._usage.completion += response.usage.completion_tokens or 0
        return response.choices[0].message.content.strip()


@dataclasses.dataclass
class _Usage:
    prompt: int = 0
    completion: int = 0


REACT_FORMAT = (
    "\n\nFormat every reply as:\nThought:\n<your reasoning about what to say next>\nUser Response:\n"
    "<the message you send to the agent>"
)
SUPERVISOR_PROMPT = (
    "You check a simulated customer's next message. It is valid when it follows the customer's instructions, "
    "reveals only information the instructions give, stays in character, and ends the conversation with "
    "###STOP### only once the goal is met. Reply with exactly one word: true or false."
)
REFLECTION_PROMPT = (
    "That reply may not follow your instructions (wrong or invented information, revealing too much at once, "
    "or stopping too early). Reflect on it, then write only the corrected customer message."
)


def _system_prompt(instruction: str, react: bool) -> str:
    guidelines = (
        resources.files("tau2").joinpath("data/tau2/user_simulator/simulation_guidelines.md").read_text().strip()
    )
    return f"{guidelines}{REACT_FORMAT if react else ''}\n\n<scenario>\n{instruction}\n</scenario>"
