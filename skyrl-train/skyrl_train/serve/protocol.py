"""Request models of the OpenAI-compatible endpoints, and OpenAI's error shape.

Unknown request fields are rejected (400 naming the field) rather than silently ignored. Fields that OpenAI clients
commonly send but that do not change generation here are accepted: `tool_choice` and `parallel_tool_calls` (tools
are rendered into the prompt, generation is not constrained), `user`, `metadata`, `store`, `service_tier`.
Sampling features the engine lacks (presence/frequency penalties, logit bias, JSON mode, top-n logprobs, echo,
suffix, best_of) are accepted only at their neutral value, so a request relying on them fails loudly. Besides the
OpenAI fields, the vLLM extensions `top_k`, `min_p`, `repetition_penalty`, `ignore_eos`, `return_token_ids` and
`include_stop_str_in_output` are understood.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class OpenAIError(Exception):
    """An error returned in OpenAI's JSON shape: `{"error": {"message", "type", "param", "code"}}`, with a
    `Retry-After` header when `retry_after_s` is set."""

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        status_code: int = 400,
        type: str = "invalid_request_error",
        code: str | None = None,
        retry_after_s: int | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.param = param
        self.status_code = status_code
        self.type = type
        self.code = code
        self.retry_after_s = retry_after_s

    def headers(self) -> dict[str, str] | None:
        return None if self.retry_after_s is None else {"Retry-After": str(self.retry_after_s)}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    include_usage: bool = False
    """Send a last chunk (with empty `choices`) carrying the request's `usage`."""


class SamplingRequest(BaseModel):
    """Fields shared by chat and text completions."""

    model_config = ConfigDict(extra="forbid")

    model: str
    temperature: float | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0, le=1)
    n: int = Field(1, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    metadata: dict[str, Any] | None = None
    store: bool | None = None
    service_tier: str | None = None
    # vLLM extensions
    top_k: int | None = Field(None, ge=-1)
    """-1 or 0 = off."""
    min_p: float | None = Field(None, ge=0, lt=1)
    repetition_penalty: float | None = Field(None, gt=0)
    ignore_eos: bool = False
    return_token_ids: bool = False
    """Add `prompt_token_ids`, `token_ids` (exactly the sampled ids) and `weight_version` (of the weights that
    generated the choice) to each choice (token-out)."""
    include_stop_str_in_output: bool = False
    """Keep the stop string that ended a choice at the end of its text."""

    def stop_strings(self) -> list[str] | None:
        if self.stop is None:
            return None
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop)
        return [s for s in stops if s] or None

    def field_problems(self) -> dict[str, str]:
        """What is wrong with this request beyond its types (unsupported features, conflicts): field -> why."""
        problems = {}
        if self.presence_penalty:
            problems["presence_penalty"] = "presence_penalty is not supported (use repetition_penalty)"
        if self.frequency_penalty:
            problems["frequency_penalty"] = "frequency_penalty is not supported (use repetition_penalty)"
        if self.logit_bias:
            problems["logit_bias"] = "logit_bias is not supported"
        return problems


class ChatMessage(BaseModel):
    """One chat message. Keys beyond OpenAI's are kept and passed to the chat template unchanged."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None

    @field_validator("content")
    @classmethod
    def _text_parts_only(cls, content):
        if isinstance(content, list):
            for part in content:
                if part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise ValueError(f"only text content parts are supported, got type {part.get('type')!r}")
        return content


class FunctionDefinition(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ToolDefinition(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["function"] = "function"
    function: FunctionDefinition


class ChatCompletionRequest(SamplingRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[ToolDefinition] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    response_format: dict[str, Any] | None = None

    def field_problems(self) -> dict[str, str]:
        problems = super().field_problems()
        if self.top_logprobs:
            problems["top_logprobs"] = (
                "top_logprobs > 0 is not supported; logprobs=true returns the sampled tokens' logprobs"
            )
        if self.response_format is not None and self.response_format.get("type") != "text":
            problems["response_format"] = "only response_format {'type': 'text'} is supported"
        if self.max_tokens is not None and self.max_completion_tokens not in (None, self.max_tokens):
            problems["max_completion_tokens"] = "max_tokens and max_completion_tokens differ; give one of them"
        return problems


class CompletionRequest(SamplingRequest):
    prompt: str | list[str] | list[int] | list[list[int]]
    """Text, several texts, token ids, or several token-id lists (token-in)."""
    max_tokens: int = Field(16, ge=1)
    logprobs: int | None = Field(None, ge=0, le=5)
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = Field(None, ge=1)

    def field_problems(self) -> dict[str, str]:
        problems = super().field_problems()
        if self.logprobs:
            problems["logprobs"] = (
                "logprobs > 0 (top alternatives) is not supported; logprobs=0 returns the sampled tokens' logprobs"
            )
        if self.echo:
            problems["echo"] = "echo is not supported"
        if self.suffix:
            problems["suffix"] = "suffix is not supported"
        if self.best_of not in (None, 1):
            problems["best_of"] = "best_of > 1 is not supported"
        return problems
