"""Control routes of a standalone server (`python -m skyrl_train.serve --enable-control`), with upstream SkyRL's
names: what a trainer using this server as a remote engine calls between generation phases. They change what the
server generates with, so they exist only with `--enable-control` and each call needs the control token
(`access.AccessGuard`).

- `POST /sleep`, `POST /wake_up` (body `{"tags": [...]}` optional): release / re-acquire the engine's memory;
  generation requests that arrive while asleep wait until `/wake_up`;
- `POST /reset_prefix_cache`;
- `POST /init_weight_update_communicator` (body: `WeightSyncInitInfo` JSON): join the trainer's weight-update
  group; answers once the group has formed;
- `POST /update_weights` (body: a `WeightUpdateRequest` in its JSON form: broadcast, LoRA adapter folder
  (`{"type": "lora", "lora_path": ..., "weight_version": N}`), version only; never `cuda_ipc`, whose handles do not
  leave the job): generation requests wait while it is applied (running ones finish first); answers once applied.
  A LoRA folder must resolve (symlinks and `..` followed) to a folder under the server's `--lora-root`; without
  one, LoRA load requests are refused (403);
- `POST /destroy_weights_update_group`.

Each answers `{"status": "ok", "weight_version": N}` (the version the engine now generates with), or an OpenAI-shaped
error: 400 for a malformed body or a request the engine refuses, 403 for a LoRA folder outside `--lora-root`, 500
(generic text; the details go to the server's log) when the engine fails.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from fastapi import Body, FastAPI

from skyrl_train.inference_engines.base import InferenceEngineInterface
from skyrl_train.serve.gate import ServingGate
from skyrl_train.serve.protocol import OpenAIError
from skyrl_train.types.weight_sync_init_info import WeightSyncInitInfo
from skyrl_train.types.weight_sync_requests import LoraLoadRequest, WeightUpdateRequest

logger = logging.getLogger(__name__)

CONTROL_PATHS = (
    "/sleep",
    "/wake_up",
    "/reset_prefix_cache",
    "/init_weight_update_communicator",
    "/update_weights",
    "/destroy_weights_update_group",
)
"""The paths of the control routes (each needs the control token)."""


def add_control_routes(
    app: FastAPI, engine: InferenceEngineInterface, gate: ServingGate, *, lora_root: str | Path | None = None
) -> None:
    """Add the control routes to `app`; generation requests pass `gate` (open unless asleep or updating). LoRA load
    requests must name folders under `lora_root` (None refuses them all)."""

    def status() -> dict[str, Any]:
        return {"status": "ok", "weight_version": getattr(engine, "weight_version", None)}

    async def run(action: str, call) -> dict[str, Any]:
        try:
            await call
        except (ValueError, KeyError) as error:  # the engine refused the request (names what does not fit)
            logger.warning("%s refused: %s", action, error)
            raise OpenAIError(f"{action}: {error}") from error
        except Exception as error:
            logger.exception("%s failed", action)
            raise OpenAIError(
                f"{action} failed (the server's log has the details)", status_code=500, type="server_error"
            ) from error
        return status()

    @app.post("/sleep")
    async def sleep() -> dict[str, Any]:
        await gate.close()
        return await run("sleep", engine.sleep())

    @app.post("/wake_up")
    async def wake_up(body: dict[str, Any] | None = Body(None)) -> dict[str, Any]:
        result = await run("wake_up", engine.wake_up((body or {}).get("tags")))
        gate.open()
        return result

    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache() -> dict[str, Any]:
        return await run("reset_prefix_cache", engine.reset_prefix_cache())

    @app.post("/init_weight_update_communicator")
    async def init_weight_update_communicator(body: dict[str, Any] = Body(...)) -> dict[str, Any]:
        info = _parsed("init_weight_update_communicator", WeightSyncInitInfo.from_json, body)
        return await run("init_weight_update_communicator", engine.init_weight_update_communicator(info))

    @app.post("/update_weights")
    async def update_weights(body: dict[str, Any] = Body(...)) -> dict[str, Any]:
        request = _parsed("update_weights", WeightUpdateRequest.from_json, body)
        if isinstance(request, LoraLoadRequest):
            request = dataclasses.replace(request, lora_path=str(_folder_under(lora_root, request.lora_path)))
        reopen = gate.is_open
        await gate.close()
        try:
            return await run("update_weights", engine.update_named_weights(request))
        finally:
            if reopen:
                gate.open()

    @app.post("/destroy_weights_update_group")
    async def destroy_weights_update_group() -> dict[str, Any]:
        return await run("destroy_weights_update_group", engine.destroy_weights_update_group())


def _folder_under(root: str | Path | None, path: str) -> Path:
    """`path` resolved (symlinks and `..` followed); raises OpenAIError (403) unless it is a folder under `root`."""
    if root is None:
        raise OpenAIError(
            "update_weights: LoRA loading is off on this server (start it with --lora-root FOLDER)",
            param="lora_path",
            status_code=403,
            type="permission_error",
        )
    try:
        resolved, root = Path(path).resolve(), Path(root).resolve()
        inside = resolved.is_relative_to(root) and resolved.is_dir()
    except (OSError, ValueError):  # a NUL byte, a symlink loop
        inside = False
    if not inside:
        raise OpenAIError(
            f"update_weights: lora_path {path!r} is not a folder under this server's --lora-root",
            param="lora_path",
            status_code=403,
            type="permission_error",
        )
    return resolved


def _parsed(action: str, parse, body: dict[str, Any]):
    try:
        return parse(body)
    except (ValueError, TypeError) as error:
        raise OpenAIError(f"{action}: invalid body: {error}") from error
