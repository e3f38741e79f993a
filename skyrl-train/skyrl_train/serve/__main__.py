"""Serve a model with an OpenAI-compatible API: `python -m skyrl_train.serve --model smollm2-135m-instruct`.

`--model` is any HF folder or hub id, or a built-in alias (the default CPU model `smollm2-135m-instruct`). The
server prints its base URL once it accepts requests; point any OpenAI client at it, e.g.
`OpenAI(base_url="http://127.0.0.1:8000/v1", api_key=<any string>)` with `model=<--served-model-name>` (default: the
`--model` value as given). SIGINT / SIGTERM stop it cleanly (running requests get a few seconds, then the engine
is torn down). Only the `hf` (transformers) backend exists; other `--backend` values are refused.

Besides the OpenAI routes it has the control routes a trainer drives a remote engine with (`serve.control`: sleep /
wake, prefix-cache reset, weight-update group and weight updates, LoRA adapters), so a training run can use it with
`generator.run_engines_locally=false generator.remote_inference_engine_urls=[host:port]`.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import sys

import uvicorn

from skyrl_train.serve.app import create_app
from skyrl_train.serve.endpoint import GRACEFUL_SHUTDOWN_S, base_url, bind_socket
from skyrl_train.serve.serving import ToolCallParser, context_length

logger = logging.getLogger("skyrl_train.serve")

BACKENDS = ("hf", "vllm")
AVAILABLE_BACKENDS = ("hf",)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m skyrl_train.serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="HF folder, hub id or built-in alias (smollm2-135m-instruct)")
    parser.add_argument("--host", default="127.0.0.1", help="default: %(default)s")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port (printed); default: %(default)s")
    parser.add_argument("--served-model-name", help="the `model` name clients pass; default: the --model value")
    parser.add_argument("--backend", choices=BACKENDS, default="hf", help="default: %(default)s (vllm: not available)")
    parser.add_argument(
        "--max-num-seqs", type=int, default=8, help="most sequences decoded in one forward pass; default: %(default)s"
    )
    parser.add_argument("--dtype", default="float32", help="float32, bfloat16, float16 or auto; default: %(default)s")
    parser.add_argument(
        "--seed", type=int, default=0, help="engine RNG seed (requests may pass their own); default: %(default)s"
    )
    parser.add_argument(
        "--tool-call-parser",
        metavar="MODULE:FUNCTION",
        help="turns generated text into structured `tool_calls` for requests with `tools`, e.g. "
        "skyrl_integrations.tool_parser:parse_tool_calls; default: none (the text is returned as `content`)",
    )
    parser.add_argument(
        "--log-level", default="info", choices=("debug", "info", "warning", "error"), help="default: %(default)s"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.backend not in AVAILABLE_BACKENDS:
        parser.error(
            f"--backend {args.backend} is not available in this build (no vLLM engine is implemented); "
            f"use --backend {' or '.join(AVAILABLE_BACKENDS)}"
        )
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    tool_call_parser = _import_parser(parser, args.tool_call_parser) if args.tool_call_parser else None
    try:
        sock = bind_socket(args.host, args.port)  # before loading the model, so a taken port fails fast
    except OSError as error:
        parser.exit(1, f"{parser.prog}: error: {error.strerror}\n")

    from skyrl_train.inference_engines.hf.engine import HFInferenceEngine
    from skyrl_train.models import load_causal_lm, load_tokenizer

    tokenizer = load_tokenizer(args.model)
    model = load_causal_lm(args.model, dtype=args.dtype).eval()
    engine = HFInferenceEngine(model, tokenizer, max_num_seqs=args.max_num_seqs, seed=args.seed)
    name = args.served_model_name or args.model

    @contextlib.asynccontextmanager
    async def lifespan(app):
        try:
            yield
        finally:
            await engine.teardown()
            logger.info("engine torn down")

    app = create_app(
        engine,
        tokenizer,
        served_model_name=name,
        max_model_len=context_length(engine, tokenizer),
        tool_call_parser=tool_call_parser,
        control_routes=True,
        lifespan=lifespan,
    )
    url = base_url(args.host, sock.getsockname()[1]) + "/v1"
    config = uvicorn.Config(app, log_level=args.log_level, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S)
    _AnnouncingServer(config, f"serving {name!r} at {url}").run(sockets=[sock])
    return 0


class _AnnouncingServer(uvicorn.Server):
    """Prints a line once the server accepts requests (scripts and tests wait for it)."""

    def __init__(self, config: uvicorn.Config, announcement: str):
        super().__init__(config)
        self.announcement = announcement

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        if self.started:
            print(self.announcement, flush=True)


def _import_parser(parser: argparse.ArgumentParser, spec: str) -> ToolCallParser:
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        parser.error(f"--tool-call-parser must look like MODULE:FUNCTION, got {spec!r}")
    try:
        function = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        parser.error(f"--tool-call-parser {spec}: {error}")
    if not callable(function):
        parser.error(f"--tool-call-parser {spec} is not callable")
    return function


if __name__ == "__main__":
    sys.exit(main())
