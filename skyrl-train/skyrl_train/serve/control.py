"""Control routes of a standalone server (`python -m skyrl_train.serve`), with upstream SkyRL's names: what a trainer
using this server as a remote engine calls between generation phases.

- `POST /sleep`, `POST /wake_up` (body `{"tags": [...]}` optional): release / re-acquire the engine's memory;
  generation requests that arrive while asleep wait until `/wake_up`;
- `POST /reset_prefix_cache`;
- `POST /init_weight_update_communicator` (body: `WeightSyncInitInfo` JSON): join the trainer's weight-update
  group; answers once the group has formed;
- `POST /update_weights` (body: a `WeightUpdateRequest` JSON of any type: broadcast, LoRA adapter folder
  (`{"type": "lora", "lora_path": ..., "weight_version": N}`), version only): generation requests wait while it
  is applied (running ones finish first); answers once applied;
- `POST /destroy_weights_update_group`.

Each answers `{"status": "ok", "weight_version": N}` (the version the engine now generates with), or an OpenAI-shaped
error: 400 for a malformed body, 500 when the engine fails.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import Body, FastAPI

from skyrl_train.inference_engines.base import InferenceEngineInterface
from skyrl_train.serve.gate import ServingGate
from skyrl_train.serve.protocol import OpenAIError
from skyrl_train.types.weight_sync_init_info import WeightSyncInitInfo
from skyrl_train.types.weight_sync_requests import WeightUpdateRequest

logger = logging.getLogger(__name__)


def add_control_routes(app: FastAPI, engine: InferenceEngineInterface, gate: ServingGate) -> None:
    """Add the control routes to `app`; generation requests pass `gate` (open unless asleep or updating)."""

    def status() -> dict[str, Any]:
        return {"status": "ok", "weight_version": getattr(engine, "weight_version", None)}

    async def run(action: str, call) -> dict[str, Any]:
        try:
            await call
        except (ValueError, TypeError, KeyError) as error:
            raise OpenAIError(f"{action}: {error}") from error
        except Exception as error:
            logger.exception("%s failed", action)
            raise OpenAIError(f"{action} failed: {error!r}", status_code=500, type="server_error") from error
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


def _parsed(action: str, parse, body: dict[str, Any]):
    try:
        return parse(body)
    except (ValueError, TypeError) as error:
        raise OpenAIError(f"{action}: invalid body: {error}") from error
