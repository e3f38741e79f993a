"""`create_app`: an OpenAI-compatible FastAPI app over any `InferenceEngineInterface`.

Routes: `GET /health` (with the weight version the engine generates with), `GET /v1/models`, `POST
/v1/chat/completions`, `POST /v1/completions` (see `serving` for the request conventions and `protocol` for the
accepted fields), and with `control_routes` the control routes of `control` (sleep / wake, weight sync). In front of
every route, `access.AccessGuard` checks the Host, Origin, API key / control token, content type and body size.
Every error, a malformed body included, comes back in OpenAI's shape `{"error": {"message", "type", "param",
"code"}}`: 400 naming the bad field or the limit it passes (`limits.ServeLimits`), 401 / 403 / 421 / 415 / 413 from
the guard, 404 for an unknown model (as OpenAI and vLLM answer), 429 when too many requests wait, 503 while the
endpoint shuts down, 500 (generic text; the details go to the server's log) when generation fails.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse

from skyrl_train.inference_engines.base import InferenceEngineInterface
from skyrl_train.serve.access import AccessGuard, AccessPolicy
from skyrl_train.serve.gate import ServingGate
from skyrl_train.serve.limits import ServeLimits
from skyrl_train.serve.protocol import ChatCompletionRequest, CompletionRequest, OpenAIError
from skyrl_train.serve.serving import OpenAIServing, ToolCallParser, cancel_on_disconnect

logger = logging.getLogger(__name__)


def create_app(
    engine: InferenceEngineInterface,
    tokenizer,
    *,
    served_model_name: str,
    max_model_len: int,
    tool_call_parser: ToolCallParser | None = None,
    gate: ServingGate | None = None,
    control_routes: bool = False,
    access: AccessPolicy | None = None,
    limits: ServeLimits | None = None,
    lora_root: str | Path | None = None,
    lifespan=None,
) -> FastAPI:
    """The app serving `engine` under the model name `served_model_name`.

    Args:
        engine: called from the app's event loop; the caller owns it (`lifespan` may tear it down).
        tokenizer: the model's tokenizer; its chat template renders messages and tools (see `prompting`).
        max_model_len: the model's context length (e.g. `HFInferenceEngine.max_positions`).
        tool_call_parser: optional `parser(text, tools) -> result(.calls, .text)` that turns generated text into
            structured `tool_calls` when a request has `tools` (e.g. `skyrl_integrations.tool_parser.
            parse_tool_calls`); None (default) returns the generated text as plain `content`.
        gate: admission control for an engine shared with the trainer (see `ServingGate`); None admits always
            (with `control_routes`: an open gate that sleep and weight updates close).
        control_routes: add the routes a trainer drives a remote engine with (`control`); for a server that owns
            its engine, never for the trainer's own endpoint. They need `access.control_token`.
        access: who may call (`AccessPolicy`); None: `AccessPolicy()` (loopback and IP-literal hosts, no API key).
        limits: request bounds (`ServeLimits`); None: the defaults.
        lora_root: the folder LoRA load requests must name adapter folders under (control routes); None refuses
            every LoRA load request.
        lifespan: FastAPI lifespan context (startup / shutdown work such as engine teardown).

    Raises:
        ValueError: `control_routes` without a control token.
    """
    access = access or AccessPolicy()
    limits = limits or ServeLimits()
    if control_routes and not access.control_token:
        raise ValueError("control routes need a control token (AccessPolicy.control_token, --control-token)")
    if control_routes and gate is None:
        gate = ServingGate(is_open=True, max_waiting=limits.max_waiting)
    serving = OpenAIServing(
        engine,
        tokenizer,
        served_model_name=served_model_name,
        max_model_len=max_model_len,
        tool_call_parser=tool_call_parser,
        gate=gate,
        limits=limits,
    )
    if serving.renderer.tool_mode == "system_message":
        logger.warning(
            "the chat template of %s ignores `tools`: tool definitions are appended to the system message as a "
            "<tools> block asking for <tool_call> JSON replies",
            served_model_name,
        )
    elif serving.renderer.tool_mode == "unavailable":
        logger.warning("%s has no chat template: /v1/chat/completions answers 400", served_model_name)

    # No interactive docs or schema routes: nothing beyond the API is served.
    app = FastAPI(
        title="SkyRL OpenAI-compatible server", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )
    app.state.serving = serving

    app.add_exception_handler(OpenAIError, _openai_error_response)
    app.add_exception_handler(RequestValidationError, _invalid_body_response)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "weight_version": getattr(engine, "weight_version", None)}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return serving.models()

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request):
        prompt_ids, params = serving.prepare_chat(body)
        if body.stream:
            return _event_stream(serving.chat_stream(body, prompt_ids, params))
        return await cancel_on_disconnect(request.is_disconnected, serving.chat(body, prompt_ids, params))

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request):
        prompts, params = serving.prepare_completion(body)
        if body.stream:
            return _event_stream(serving.complete_stream(body, prompts, params))
        return await cancel_on_disconnect(request.is_disconnected, serving.complete(body, prompts, params))

    control_paths: tuple[str, ...] = ()
    if control_routes:
        from skyrl_train.serve.control import CONTROL_PATHS, add_control_routes

        add_control_routes(app, engine, gate, lora_root=lora_root)
        control_paths = CONTROL_PATHS
    app.add_middleware(AccessGuard, policy=access, control_paths=control_paths, max_body_bytes=limits.max_body_bytes)
    return app


def _event_stream(chunks) -> StreamingResponse:
    return StreamingResponse(chunks, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


async def _openai_error_response(request: Request, error: OpenAIError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status_code, headers=error.headers())


async def _invalid_body_response(request: Request, error: RequestValidationError) -> JSONResponse:
    return await _openai_error_response(request, _validation_error(error))


def _validation_error(error: RequestValidationError) -> OpenAIError:
    """FastAPI's 422 -> OpenAI's 400 naming the first bad field, e.g. `messages.0.role`."""
    errors = error.errors()
    first = errors[0]
    if first.get("type") == "json_invalid":
        return OpenAIError(f"the request body is not valid JSON: {first.get('msg')}")
    param, _ = _split_location(first.get("loc", ()))
    if first.get("type") == "extra_forbidden":
        return OpenAIError(f"unknown field {param!r}", param=param)
    # A value matching no member of a union type fails once per member; name the accepted forms instead.
    forms = [form for p, form in map(_split_location, (e.get("loc", ()) for e in errors)) if p == param and form]
    if len(set(forms)) > 1:
        return OpenAIError(f"{param}: expected one of {', '.join(dict.fromkeys(forms))}", param=param)
    return OpenAIError(f"{param}: {first.get('msg')}" if param else str(first.get("msg")), param=param)


def _split_location(location) -> tuple[str | None, str | None]:
    """A pydantic error location -> (the field path, e.g. `messages.0.content`; the union member that failed, e.g.
    `list[int]`, if any). The path stops at the union member: what follows is inside that member's type."""
    path = []
    for part in location:
        if part == "body" and not path:
            continue
        if isinstance(part, str) and ("[" in part or part in _TYPE_NAMES):
            return ".".join(path) or None, part
        path.append(str(part))
    return ".".join(path) or None, None


_TYPE_NAMES = frozenset({"str", "int", "float", "bool", "dict", "list", "none"})
