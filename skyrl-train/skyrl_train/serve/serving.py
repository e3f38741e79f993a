"""`OpenAIServing`: OpenAI chat / text completion requests in, engine calls, OpenAI response bodies out.

OpenAI's sampling fields are mapped onto `SamplingParams` here, at the edge, and checked against the model's
context so that a bad request gets a 400 naming its field instead of failing inside the engine. Every request is
one or more `engine.generate` calls awaited on the server's event loop; the engine batches the calls of
concurrent requests together (the `hf` engine by continuous batching).

Choice `i` of a request with `seed` uses seed `seed + i`, so `n > 1` seeded choices differ but are reproducible.
Generated text never contains the stop string that ended it (as in OpenAI's API); `token_ids` (with
`return_token_ids`) and `logprobs` cover exactly the sampled tokens, the stop string's and EOS included.
Streaming (`stream=true`) speaks OpenAI's server-sent-event format, but a choice's text arrives in one chunk once
it is complete: engines return whole generations.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

from skyrl_gym.common.stop_reasons import StopReason
from skyrl_train.inference_engines.base import InferenceEngineInterface, SamplingParams
from skyrl_train.serve.gate import ServingBusy, ServingGate, ServingStopped
from skyrl_train.serve.limits import ServeLimits
from skyrl_train.serve.prompting import ChatRenderer, ChatTemplateError
from skyrl_train.serve.protocol import ChatCompletionRequest, CompletionRequest, OpenAIError, SamplingRequest

logger = logging.getLogger(__name__)

T = TypeVar("T")

_DISCONNECT_POLL_S = 0.25
"""How often a request whose generation is running checks whether its client is still connected."""
_SSE_DONE = "data: [DONE]\n\n"
_UNSET_MODEL_MAX_LENGTH = 10**9
"""transformers sets `model_max_length` to a huge sentinel (1e30) when the tokenizer config has none."""


class ParsedToolCall(Protocol):
    name: str
    arguments: dict[str, Any]


class ParsedToolCalls(Protocol):
    calls: Sequence[ParsedToolCall]
    text: str
    """The message text with the calls removed."""


ToolCallParser = Callable[[str, list[dict[str, Any]]], ParsedToolCalls]
"""`parser(text, tools) -> result with .calls (each .name, .arguments) and .text`; tools are OpenAI-form dicts.
`skyrl_integrations.tool_parser.parse_tool_calls` has this shape."""


@dataclasses.dataclass
class Sample:
    """One generated choice."""

    text: str
    token_ids: list[int]
    finish_reason: str
    logprobs: list[float] | None
    weight_version: int | None = None
    """The weight version that generated it (`InferenceEngineOutput.weight_versions`)."""


class OpenAIServing:
    """The request logic behind the routes of `create_app` (see the module docstring for the conventions).

    Args:
        engine: any `InferenceEngineInterface`; its `generate` is called from the server's event loop.
        tokenizer: the model's tokenizer (chat template, text prompts, decoding tokens for logprobs).
        served_model_name: the only `model` value requests may name.
        max_model_len: the model's context length; prompt + max_tokens must fit in it.
        tool_call_parser: turns generated text into structured `tool_calls` when a request has `tools`; None
            returns the text as plain `content`.
        gate: if set, every request's engine calls run inside `gate.admit()` (the trainer's endpoint).
        limits: the bounds on `n`, prompts per request and `max_tokens`; None: `ServeLimits()`.
    """

    def __init__(
        self,
        engine: InferenceEngineInterface,
        tokenizer,
        *,
        served_model_name: str,
        max_model_len: int,
        tool_call_parser: ToolCallParser | None = None,
        gate: ServingGate | None = None,
        limits: ServeLimits | None = None,
    ):
        self.engine = engine
        self.tokenizer = tokenizer
        self.served_model_name = served_model_name
        self.max_model_len = max_model_len
        self.tool_call_parser = tool_call_parser
        self.gate = gate
        self.limits = limits or ServeLimits()
        self.renderer = ChatRenderer(tokenizer)
        self.vocab_size = len(tokenizer)
        self.created = int(time.time())

    # -- /v1/models ---------------------------------------------------------------------------------------------

    def models(self) -> dict[str, Any]:
        card = {
            "id": self.served_model_name,
            "object": "model",
            "created": self.created,
            "owned_by": "skyrl",
            "max_model_len": self.max_model_len,
        }
        return {"object": "list", "data": [card]}

    # -- /v1/chat/completions -------------------------------------------------------------------------------------

    def prepare_chat(self, request: ChatCompletionRequest) -> tuple[list[int], SamplingParams]:
        """Validate `request` and render its prompt; raises OpenAIError naming the bad field."""
        self._check_common(request)
        messages = [m.model_dump(exclude_none=True) for m in request.messages]
        tools = self._tool_dicts(request)
        try:
            prompt_ids = self.renderer.render(messages, tools)
        except ChatTemplateError as error:
            raise OpenAIError(str(error), param="messages") from error
        self._check_prompt(prompt_ids, "messages")
        requested = request.max_completion_tokens or request.max_tokens
        param = "max_completion_tokens" if request.max_completion_tokens else "max_tokens"
        max_tokens = self._max_tokens(len(prompt_ids), requested, param)
        return prompt_ids, _sampling_params(request, max_tokens, request.logprobs)

    async def chat(self, request: ChatCompletionRequest, prompt_ids: list[int], params: SamplingParams) -> dict:
        samples = (await self.sample([prompt_ids], params, request.n, request.include_stop_str_in_output))[0]
        choices = [self._chat_choice(request, i, sample, prompt_ids) for i, sample in enumerate(samples)]
        return {
            "id": _new_id("chatcmpl"),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.served_model_name,
            "choices": choices,
            "usage": _usage([prompt_ids], [samples]),
        }

    async def chat_stream(
        self, request: ChatCompletionRequest, prompt_ids: list[int], params: SamplingParams
    ) -> AsyncIterator[str]:
        header = {"id": _new_id("chatcmpl"), "object": "chat.completion.chunk", "model": self.served_model_name}
        yield _event(header, [_chunk_choice(i, {"role": "assistant", "content": ""}) for i in range(request.n)])
        try:
            samples = (await self.sample([prompt_ids], params, request.n, request.include_stop_str_in_output))[0]
        except OpenAIError as error:
            yield _sse(error.body())
            yield _SSE_DONE
            return
        for i, sample in enumerate(samples):
            choice = self._chat_choice(request, i, sample, prompt_ids)
            message = choice["message"]
            delta = {"content": message["content"]}
            if "tool_calls" in message:
                delta["tool_calls"] = [{"index": k, **call} for k, call in enumerate(message["tool_calls"])]
            extra = {k: choice[k] for k in ("token_ids", "prompt_token_ids", "weight_version") if k in choice}
            yield _event(header, [_chunk_choice(i, delta, logprobs=choice["logprobs"], **extra)])
            yield _event(header, [_chunk_choice(i, {}, finish_reason=choice["finish_reason"])])
        if request.stream_options is not None and request.stream_options.include_usage:
            yield _event(header, [], usage=_usage([prompt_ids], [samples]))
        yield _SSE_DONE

    # -- /v1/completions ------------------------------------------------------------------------------------------

    def prepare_completion(self, request: CompletionRequest) -> tuple[list[list[int]], SamplingParams]:
        """Validate `request` and tokenize its prompts; raises OpenAIError naming the bad field."""
        self._check_common(request)
        prompt = request.prompt
        single = isinstance(prompt, str) or (bool(prompt) and isinstance(prompt[0], int))
        if not single and len(prompt) > self.limits.max_prompts:
            raise OpenAIError(
                f"prompt has {len(prompt)} prompts; this server takes at most {self.limits.max_prompts} per request "
                "(--max-prompts)",
                param="prompt",
            )
        if isinstance(prompt, str):
            prompts = [self._encode(prompt)]
        elif single:
            prompts = [list(prompt)]
        else:
            prompts = [self._encode(p) if isinstance(p, str) else list(p) for p in prompt]
        if not prompts:
            raise OpenAIError("prompt is an empty list", param="prompt")
        for ids in prompts:
            self._check_prompt(ids, "prompt")
        max_tokens = self._max_tokens(max(len(ids) for ids in prompts), request.max_tokens, "max_tokens")
        return prompts, _sampling_params(request, max_tokens, request.logprobs is not None)

    async def complete(self, request: CompletionRequest, prompts: list[list[int]], params: SamplingParams) -> dict:
        samples = await self.sample(prompts, params, request.n, request.include_stop_str_in_output)
        return {
            "id": _new_id("cmpl"),
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.served_model_name,
            "choices": self._completion_choices(request, prompts, samples),
            "usage": _usage(prompts, samples),
        }

    async def complete_stream(
        self, request: CompletionRequest, prompts: list[list[int]], params: SamplingParams
    ) -> AsyncIterator[str]:
        header = {"id": _new_id("cmpl"), "object": "text_completion", "model": self.served_model_name}
        try:
            samples = await self.sample(prompts, params, request.n, request.include_stop_str_in_output)
        except OpenAIError as error:
            yield _sse(error.body())
            yield _SSE_DONE
            return
        for choice in self._completion_choices(request, prompts, samples):
            finish_reason = choice.pop("finish_reason")
            yield _event(header, [{**choice, "finish_reason": None}])
            yield _event(
                header, [{"index": choice["index"], "text": "", "logprobs": None, "finish_reason": finish_reason}]
            )
        if request.stream_options is not None and request.stream_options.include_usage:
            yield _event(header, [], usage=_usage(prompts, samples))
        yield _SSE_DONE

    # -- engine ---------------------------------------------------------------------------------------------------

    async def sample(
        self, prompts: list[list[int]], params: SamplingParams, n: int, keep_stop_strings: bool = False
    ) -> list[list[Sample]]:
        """`n` samples of every prompt, `[prompt][choice]`; engine failures become OpenAIError (5xx). The text of a
        sample that ended on a stop string loses it unless `keep_stop_strings`."""
        admission = self.gate.admit() if self.gate is not None else contextlib.nullcontext()
        try:
            async with admission:
                outputs = await _gather(
                    self.engine.generate({"prompt_token_ids": prompts, "sampling_params": _choice_params(params, i)})
                    for i in range(n)
                )
        except ServingStopped as error:
            raise OpenAIError(str(error), status_code=503, type="service_unavailable") from error
        except ServingBusy as error:
            raise OpenAIError(str(error), status_code=429, type="rate_limit_error", retry_after_s=1) from error
        except Exception as error:
            logger.exception("generation failed")
            raise OpenAIError(
                "generation failed (the server's log has the details)", status_code=500, type="server_error"
            ) from error
        stops = [] if keep_stop_strings else params.stop or []
        return [
            [_sample_of(output, row, stops, params.logprobs is not None) for output in outputs]
            for row in range(len(prompts))
        ]

    # -- request checks -------------------------------------------------------------------------------------------

    def _check_common(self, request: SamplingRequest) -> None:
        if request.model != self.served_model_name:
            raise OpenAIError(
                f"the model {request.model!r} does not exist; this server serves {self.served_model_name!r}",
                param="model",
                status_code=404,
                code="model_not_found",
            )
        problems = request.field_problems()
        if problems:
            field, why = next(iter(problems.items()))
            raise OpenAIError(why, param=field)
        if request.n > self.limits.max_n:
            raise OpenAIError(
                f"n={request.n} is more than this server's limit of {self.limits.max_n} choices per request (--max-n)",
                param="n",
            )

    def _check_prompt(self, ids: list[int], param: str) -> None:
        if not ids:
            raise OpenAIError(f"{param} is empty: at least one prompt token is needed", param=param)
        if min(ids) < 0 or max(ids) >= self.vocab_size:
            raise OpenAIError(f"{param} has token ids outside the vocabulary [0, {self.vocab_size})", param=param)
        if len(ids) >= self.max_model_len:
            raise OpenAIError(
                f"{param} is {len(ids)} tokens long, which leaves no room for a completion in this model's "
                f"context of {self.max_model_len} tokens",
                param=param,
            )

    def _max_tokens(self, prompt_len: int, requested: int | None, param: str) -> int:
        room = self.max_model_len - prompt_len
        limit = self.limits.max_tokens
        if requested is None:
            return room if limit is None else min(room, limit)
        if limit is not None and requested > limit:
            raise OpenAIError(
                f"{param}={requested} is more than this server's limit of {limit} tokens per choice (--max-tokens)",
                param=param,
            )
        if requested > room:
            raise OpenAIError(
                f"{param}={requested} plus the {prompt_len}-token prompt exceeds this model's context of "
                f"{self.max_model_len} tokens (at most {room} completion tokens fit)",
                param=param,
            )
        return requested

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=True)["input_ids"])

    def _tool_dicts(self, request: ChatCompletionRequest) -> list[dict[str, Any]] | None:
        if not request.tools:
            return None
        return [tool.model_dump(exclude_none=True) for tool in request.tools]

    # -- responses ------------------------------------------------------------------------------------------------

    def _chat_choice(self, request: ChatCompletionRequest, index: int, sample: Sample, prompt_ids: list[int]) -> dict:
        message: dict[str, Any] = {"role": "assistant", "content": sample.text}
        finish_reason = sample.finish_reason
        tools = self._tool_dicts(request)
        if tools and self.tool_call_parser is not None:
            parsed = self.tool_call_parser(sample.text, tools)
            if parsed.calls:
                message = {
                    "role": "assistant",
                    "content": parsed.text or None,
                    "tool_calls": [_tool_call(call) for call in parsed.calls],
                }
                if finish_reason == StopReason.STOP:
                    finish_reason = "tool_calls"
        logprobs = None
        if sample.logprobs is not None:
            tokens = self._token_strings(sample.token_ids)
            logprobs = {
                "content": [
                    {"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []}
                    for t, lp in zip(tokens, sample.logprobs, strict=True)
                ],
                "refusal": None,
            }
        choice = {"index": index, "message": message, "finish_reason": finish_reason, "logprobs": logprobs}
        if request.return_token_ids:
            choice.update(prompt_token_ids=prompt_ids, token_ids=sample.token_ids, weight_version=sample.weight_version)
        return choice

    def _completion_choices(
        self, request: CompletionRequest, prompts: list[list[int]], samples: list[list[Sample]]
    ) -> list[dict]:
        choices = []
        for row, (prompt_ids, row_samples) in enumerate(zip(prompts, samples, strict=True)):
            for i, sample in enumerate(row_samples):
                choice = {
                    "index": row * request.n + i,
                    "text": sample.text,
                    "finish_reason": sample.finish_reason,
                    "logprobs": None if sample.logprobs is None else self._completion_logprobs(sample),
                }
                if request.return_token_ids:
                    choice.update(
                        prompt_token_ids=prompt_ids, token_ids=sample.token_ids, weight_version=sample.weight_version
                    )
                choices.append(choice)
        return choices

    def _completion_logprobs(self, sample: Sample) -> dict[str, Any]:
        tokens = self._token_strings(sample.token_ids)
        offsets, position = [], 0
        for token in tokens:
            offsets.append(position)
            position += len(token)
        return {"tokens": tokens, "token_logprobs": sample.logprobs, "top_logprobs": None, "text_offset": offsets}

    def _token_strings(self, token_ids: list[int]) -> list[str]:
        return [self.tokenizer.decode([token_id]) for token_id in token_ids]


def context_length(engine: InferenceEngineInterface, tokenizer) -> int:
    """The model's context length: the engine's `max_positions` (the hf engine has it), else the tokenizer's
    `model_max_length`. Raises ValueError when neither is known."""
    length = getattr(engine, "max_positions", None) or getattr(tokenizer, "model_max_length", None)
    if not length or length > _UNSET_MODEL_MAX_LENGTH:
        raise ValueError("cannot tell the model's context length; pass max_model_len explicitly")
    return int(length)


def _sampling_params(request: SamplingRequest, max_tokens: int, logprobs: bool) -> SamplingParams:
    """OpenAI (and vLLM-extension) sampling fields -> SamplingParams; an unset field keeps OpenAI's default."""
    return SamplingParams(
        max_generate_length=max_tokens,
        temperature=1.0 if request.temperature is None else request.temperature,
        top_p=1.0 if request.top_p is None else request.top_p,
        top_k=-1 if request.top_k in (None, 0) else request.top_k,
        min_p=request.min_p or 0.0,
        repetition_penalty=request.repetition_penalty or 1.0,
        logprobs=0 if logprobs else None,
        stop=request.stop_strings(),
        seed=request.seed,
        additional_kwargs={"ignore_eos": True} if request.ignore_eos else {},
    )


def _choice_params(params: SamplingParams, choice: int) -> SamplingParams:
    if params.seed is None or choice == 0:
        return params
    return params.replace(seed=params.seed + choice)


async def _gather(calls) -> list:
    """Await every coroutine; on the first failure cancel the others (freeing their engine slots) and raise."""
    tasks = [asyncio.ensure_future(call) for call in calls]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        raise


def _sample_of(output, row: int, stops: list[str], with_logprobs: bool) -> Sample:
    text, reason = output["responses"][row], output["stop_reasons"][row]
    if reason == StopReason.STOP:
        matched = [stop for stop in stops if text.endswith(stop)]
        if matched:
            text = text[: -len(max(matched, key=len))]
    logprobs = output["response_logprobs"][row] if with_logprobs else None
    version = (output.get("weight_versions") or [None] * (row + 1))[row]
    return Sample(
        text=text,
        token_ids=list(output["response_ids"][row]),
        finish_reason=reason,
        logprobs=logprobs,
        weight_version=version,
    )


def _tool_call(call: ParsedToolCall) -> dict[str, Any]:
    return {
        "id": _new_id("call"),
        "type": "function",
        "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)},
    }


def _usage(prompts: list[list[int]], samples: list[list[Sample]]) -> dict[str, int]:
    prompt_tokens = sum(len(ids) for ids in prompts)
    completion_tokens = sum(len(s.token_ids) for row in samples for s in row)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _chunk_choice(index: int, delta: dict, *, finish_reason: str | None = None, logprobs=None, **extra) -> dict:
    return {"index": index, "delta": delta, "finish_reason": finish_reason, "logprobs": logprobs, **extra}


def _new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def _event(header: dict, choices: list[dict], **extra) -> str:
    """One streamed chunk: `header` (id, object, model) + `created` + `choices` (+ e.g. `usage`)."""
    return _sse({**header, "created": int(time.time()), "choices": choices, **extra})


def _sse(payload: dict) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


async def cancel_on_disconnect(is_disconnected: Callable[[], Awaitable[bool]], work: Awaitable[T]) -> T:
    """Await `work`, cancelling it (which frees its engine slots) if the client goes away first. (Streaming
    responses need no such watch: Starlette cancels a stream whose client disconnects.)"""
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=_DISCONNECT_POLL_S)
            if done:
                return task.result()
            if await is_disconnected():
                raise OpenAIError("the client disconnected", status_code=499, type="client_closed_request")
    finally:
        task.cancel()
