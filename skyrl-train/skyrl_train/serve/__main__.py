"""Serve a model with an OpenAI-compatible API: `python -m skyrl_train.serve --model smollm2-135m-instruct`.

`--model` is any HF folder or hub id, or a built-in alias (the default CPU model `smollm2-135m-instruct`). The
server prints its base URL once it accepts requests; point any OpenAI client at it, e.g.
`OpenAI(base_url="http://127.0.0.1:8000/v1", api_key=<the --api-key; any string without one>)` with
`model=<--served-model-name>` (default: the `--model` value as given). SIGINT / SIGTERM stop it cleanly (running
requests get a few seconds, then the engine is torn down). Only the `hf` (transformers) backend exists; other
`--backend` values are refused.

Access (`serve.access`, docs/security.md): `--api-key` (or `SKYRL_API_KEY`) makes the OpenAI routes need
`Authorization: Bearer <key>`; the Host header must name a loopback name, an IP address, the `--host` or one of
`--allowed-hosts`; browser origins other than the server's own need `--allowed-origins`; POST bodies must be JSON.

With `--enable-control` it also has the control routes a trainer drives a remote engine with (`serve.control`: sleep
/ wake, prefix-cache reset, weight-update group and weight updates, LoRA adapters from folders under `--lora-root`),
each needing the control token (`SKYRL_CONTROL_TOKEN`, or `--control-token`; without one the server refuses to start,
also on 127.0.0.1, which every user and process of the machine can reach), so a training run can use it with
`generator.run_engines_locally=false generator.remote_inference_engine_urls=[host:port]
generator.remote_inference_engine_control_token=...`. Without `--enable-control` those routes answer 404.

Limits (`serve.limits.ServeLimits`): `--max-n`, `--max-prompts`, `--max-tokens`, `--max-body-bytes`, `--max-waiting`.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import sys

import uvicorn

from skyrl_train.serve.access import LOOPBACK_HOSTS, AccessPolicy
from skyrl_train.serve.app import create_app
from skyrl_train.serve.endpoint import GRACEFUL_SHUTDOWN_S, base_url, bind_socket
from skyrl_train.serve.limits import ServeLimits
from skyrl_train.serve.serving import ToolCallParser, context_length

logger = logging.getLogger("skyrl_train.serve")

BACKENDS = ("hf", "vllm")
AVAILABLE_BACKENDS = ("hf",)
API_KEY_ENV = "SKYRL_API_KEY"  # pragma: allowlist secret (a variable name)
CONTROL_TOKEN_ENV = "SKYRL_CONTROL_TOKEN"
_LIMIT_DEFAULTS = ServeLimits()
_LIMIT_HELP = {
    "max_n": "most choices (n) per request",
    "max_prompts": "most prompts per /v1/completions request",
    "max_tokens": "most tokens generated per choice",
    "max_body_bytes": "largest request body (413 beyond it, before the rest is read)",
    "max_waiting": "most requests waiting while generation is paused (sleep, weight update); one more gets 429",
}
"""`ServeLimits` field -> the help text of its flag (`--max-n`, ...)."""


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
    access = parser.add_argument_group("access (docs/security.md)")
    access.add_argument(
        "--api-key",
        help=f"the OpenAI routes need `Authorization: Bearer <key>` (401 otherwise); default: ${API_KEY_ENV}, else "
        "none (open). Prefer the environment variable: other users of the machine can read the command line",
    )
    access.add_argument(
        "--enable-control",
        action="store_true",
        help="add the control routes (sleep, wake_up, weight updates, LoRA loading) a trainer drives a remote engine "
        "with; without it they answer 404",
    )
    access.add_argument(
        "--control-token",
        help=f"the token the control routes need (401 without, 403 wrong); default: ${CONTROL_TOKEN_ENV}; required "
        "with --enable-control",
    )
    access.add_argument(
        "--lora-root",
        help="LoRA load requests must name adapter folders under this folder (after following symlinks and ..); "
        "default: none (refused)",
    )
    access.add_argument(
        "--allowed-hosts",
        default="",
        help="comma-separated host names the Host header may name besides loopback names, IP addresses and --host "
        "(421 otherwise; DNS rebinding)",
    )
    access.add_argument(
        "--allowed-origins",
        default="",
        help="comma-separated browser origins (e.g. http://localhost:3000) allowed besides the server's own (403)",
    )
    limits = parser.add_argument_group("limits (a request over one is refused; docs/security.md)")
    for name, help_text in _LIMIT_HELP.items():
        default = getattr(_LIMIT_DEFAULTS, name)
        shown = "%(default)s" if default is not None else "the model's context length less the prompt"
        limits.add_argument(
            f"--{name.replace('_', '-')}", type=int, default=default, help=f"{help_text}; default: {shown}"
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
    access, limits = _access_and_limits(parser, args)
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
        control_routes=args.enable_control,
        access=access,
        limits=limits,
        lora_root=args.lora_root,
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


def _access_and_limits(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[AccessPolicy, ServeLimits]:
    """The access policy and limits the flags and environment ask for; exits with a usage error naming the flag."""
    control_token = args.control_token or (os.environ.get(CONTROL_TOKEN_ENV) if args.enable_control else None)
    if args.enable_control and not control_token:
        parser.error(
            f"--enable-control needs a control token: set {CONTROL_TOKEN_ENV} (or --control-token), and the same "
            "token in the trainer's generator.remote_inference_engine_control_token"
        )
    for flag, value in (("--control-token", args.control_token), ("--lora-root", args.lora_root)):
        if value and not args.enable_control:
            parser.error(f"{flag} has no effect without --enable-control")
    try:
        limits = ServeLimits(**{name: getattr(args, name) for name in _LIMIT_HELP})
    except ValueError as error:
        parser.error(f"--{str(error).replace('_', '-')}")
    api_key = args.api_key or os.environ.get(API_KEY_ENV) or None
    if api_key is None and args.host not in LOOPBACK_HOSTS:
        logger.warning(
            "serving on %s without --api-key: anyone who can reach it can generate (set %s)", args.host, API_KEY_ENV
        )
    access = AccessPolicy.for_bind_host(
        args.host,
        api_key=api_key,
        control_token=control_token,
        allowed_hosts=_names(args.allowed_hosts),
        allowed_origins=_names(args.allowed_origins),
    )
    return access, limits


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


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
