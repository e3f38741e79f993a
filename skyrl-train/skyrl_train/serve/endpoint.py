"""Serving from a background thread: `BackgroundServer` (any ASGI app) and `PolicyEndpoint` (the trainer's live
policy, `generator.enable_http_endpoint=true`).

Event loops: the endpoint's uvicorn loop runs in its own thread and calls `engine.generate` directly. That is
right for `HFInferenceEngine`, which binds each call's futures to the loop that made the call and batches the
calls of every thread in its scheduler thread: HTTP requests and the generator's rollouts share forward passes.
(An engine tied to one event loop would instead need its calls forwarded to that loop with
`asyncio.run_coroutine_threadsafe`.)

Weights: the `hf` engine holds the policy's own module, so the endpoint always serves the current weights, with
no sync step. To never run a generation while the optimizer changes those weights, HTTP requests pass a
`ServingGate` that is open only while the trainer generates (rollouts and evals): `serve_during_generation` wraps
the generator to open it when `generate` starts and, when `generate` returns, to close it and wait for the HTTP
requests still running. Requests that arrive between generation phases wait for the next one.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any

import uvicorn

from skyrl_train.generators.base import GeneratorInput, GeneratorInterface, GeneratorOutput
from skyrl_train.inference_engines.base import InferenceEngineInterface
from skyrl_train.serve.access import LOOPBACK_HOSTS, AccessPolicy
from skyrl_train.serve.app import create_app
from skyrl_train.serve.gate import ServingGate
from skyrl_train.serve.serving import context_length

logger = logging.getLogger(__name__)

GRACEFUL_SHUTDOWN_S = 5
"""Seconds running requests get to finish when a server stops."""


class BackgroundServer:
    """Runs an ASGI `app` with uvicorn on a daemon thread. `port=0` picks a free port (see `url`)."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"):
        self.host = host
        self._socket = bind_socket(host, port)
        self.port: int = self._socket.getsockname()[1]
        config = uvicorn.Config(app, log_level=log_level, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S, lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name="skyrl-serve", daemon=True
        )

    @property
    def url(self) -> str:
        """Base URL, e.g. `http://127.0.0.1:8000`; OpenAI clients take `url + "/v1"`."""
        return base_url(self.host, self.port)

    def start(self, timeout: float = 30.0) -> None:
        """Start serving; returns once the server accepts requests."""
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"the HTTP server on {self.url} failed to start (see the log above)")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the HTTP server on {self.url} did not start within {timeout} s")
            time.sleep(0.01)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop accepting requests, let running ones finish (at most a few seconds), and join the thread."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._socket.close()

    def __enter__(self) -> BackgroundServer:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()


class PolicyEndpoint:
    """The trainer's OpenAI-compatible endpoint over the engine its generator uses (see the module docstring).

    Args:
        engine: the generator's engine (shared, not owned: the trainer tears it down).
        tokenizer: the policy's tokenizer.
        served_model_name: the `model` value requests must name.
        max_model_len: the policy's context length; None = `context_length(engine, tokenizer)`.
        host, port: where to listen (`port=0`: a free port).
        tool_call_parser: see `create_app`.
        api_key: the OpenAI routes need `Authorization: Bearer <api_key>` (`generator.http_endpoint_api_key`);
            None leaves them open. The Host header must name a loopback name, an IP address or `host`
            (`access.AccessGuard`).
    """

    def __init__(
        self,
        engine: InferenceEngineInterface,
        tokenizer,
        *,
        served_model_name: str,
        max_model_len: int | None = None,
        host: str = "127.0.0.1",
        port: int = 8000,
        tool_call_parser=None,
        api_key: str | None = None,
    ):
        self.served_model_name = served_model_name
        self.access = AccessPolicy.for_bind_host(host, api_key=api_key)
        if api_key is None and host not in LOOPBACK_HOSTS:
            logger.warning(
                "the policy endpoint listens on %s without an API key: anyone who can reach it can generate (set "
                "generator.http_endpoint_api_key)",
                host,
            )
        self.gate = ServingGate(is_open=False)
        app = create_app(
            engine,
            tokenizer,
            served_model_name=served_model_name,
            max_model_len=max_model_len or context_length(engine, tokenizer),
            tool_call_parser=tool_call_parser,
            gate=self.gate,
            access=self.access,
        )
        self.server = BackgroundServer(app, host, port)

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> None:
        self.server.start()

    def stop(self) -> None:
        """Release waiting requests with 503, then stop the server."""
        self.gate.stop()
        self.server.stop()

    def serve_during_generation(self, generator: GeneratorInterface) -> GeneratorInterface:
        """`generator`, with this endpoint's gate open while each of its `generate` calls runs."""
        return _ServingWindow(generator, self.gate)


class _ServingWindow(GeneratorInterface):
    """A generator whose `generate` calls are the endpoint's serving windows; everything else is delegated."""

    def __init__(self, generator: GeneratorInterface, gate: ServingGate):
        self.generator = generator
        self.gate = gate

    async def generate(self, input_batch: GeneratorInput) -> GeneratorOutput:
        self.gate.open()
        try:
            return await self.generator.generate(input_batch)
        finally:
            await self.gate.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.generator, name)


def base_url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening socket, so a taken port fails here with a clear error instead of inside uvicorn's thread."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    try:
        return socket.create_server((host, port), family=family)
    except OSError as error:
        raise OSError(error.errno, f"cannot listen on {host}:{port}: {error.strerror}") from error
