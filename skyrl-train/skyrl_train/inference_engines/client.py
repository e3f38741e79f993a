"""`InferenceEngineClient`: several engines behind the one engine interface (upstream SkyRL's client).

Routing: a prompt with a session id (the generator passes the trajectory id) goes to engine
`sha256(session_id) mod N`, so every turn of an episode reaches the same engine and its prefix cache; prompts without
one are split into even contiguous chunks over the engines. Outputs come back in input order.

Failures: an engine that raises `EngineUnavailableError` (a remote server that stayed unreachable through its
retries) is taken out of service for the rest of the run: a generation call that hit it fails with that error (the
generator turns the episode into an infrastructure failure), a control call or weight sync fanned out to every engine
completes on the others, and later prompts, weight syncs and control calls go to the engines left (a session whose
engine is gone is re-hashed over them). When none is left, every call raises
`NoEngineLeftError` naming each engine and why it was dropped.

Control calls (sleep, wake_up, reset_prefix_cache, weight sync) fan out to every engine in service;
`init_weight_update_communicator` gives engine `i` (of those) its own rank offset (`WeightSyncInitInfo.for_engine`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from skyrl_train.inference_engines.base import InferenceEngineInput, InferenceEngineInterface, InferenceEngineOutput

if TYPE_CHECKING:
    from skyrl_train.types.weight_sync_init_info import WeightSyncInitInfo
    from skyrl_train.types.weight_sync_requests import WeightUpdateRequest

__all__ = ["EngineUnavailableError", "InferenceEngineClient", "NoEngineLeftError"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class EngineUnavailableError(RuntimeError):
    """An engine could not be reached (its retries are spent); it is taken out of service."""


class NoEngineLeftError(EngineUnavailableError):
    """Every engine has been taken out of service."""


class InferenceEngineClient(InferenceEngineInterface):
    """`engines` behind one interface (see the module docstring)."""

    def __init__(self, engines: Sequence[InferenceEngineInterface]):
        if not engines:
            raise ValueError("an InferenceEngineClient needs at least one engine")
        self.engines = list(engines)
        self.dropped: dict[int, str] = {}
        """Index of each engine taken out of service -> why."""

    @property
    def in_service(self) -> list[int]:
        """Indices of the engines still in service."""
        return [i for i in range(len(self.engines)) if i not in self.dropped]

    # -- generation -----------------------------------------------------------------------------------------------

    async def generate(self, input_batch: InferenceEngineInput) -> InferenceEngineOutput:
        prompts = input_batch.get("prompt_token_ids")
        key = "prompt_token_ids" if prompts is not None else "prompts"
        prompts = prompts if prompts is not None else input_batch.get("prompts")
        if prompts is None:
            raise ValueError("exactly one of prompt_token_ids and prompts must be given")
        routes = self.route(len(prompts), input_batch.get("session_ids"))
        by_engine: dict[int, list[int]] = {}
        for row, engine in enumerate(routes):
            by_engine.setdefault(engine, []).append(row)
        calls = {
            engine: self._call(
                engine,
                lambda e, rows=rows: e.generate(
                    InferenceEngineInput(
                        **{key: [prompts[r] for r in rows]},
                        sampling_params=input_batch.get("sampling_params"),
                        session_ids=_pick(input_batch.get("session_ids"), rows),
                    )
                ),
            )
            for engine, rows in by_engine.items()
        }
        results = dict(zip(calls, await asyncio.gather(*calls.values()), strict=True))
        return _merge(len(prompts), {engine: (by_engine[engine], out) for engine, out in results.items()})

    def route(self, n: int, session_ids: Sequence[str | None] | None) -> list[int]:
        """The engine index of each of `n` prompts."""
        live = self._live()
        if session_ids is not None and all(s is not None for s in session_ids):
            return [self._engine_of(session_id, live) for session_id in session_ids]
        return [live[row * len(live) // n] for row in range(n)]

    def _engine_of(self, session_id: str, live: list[int]) -> int:
        digest = int.from_bytes(hashlib.sha256(session_id.encode()).digest()[:8], "big")
        engine = digest % len(self.engines)
        return engine if engine not in self.dropped else live[digest % len(live)]

    # -- control --------------------------------------------------------------------------------------------------

    async def abort_generation(self) -> None:
        await self._fan_out(lambda e: e.abort_generation())

    async def wake_up(self, tags: list[str] | None = None) -> None:
        await self._fan_out(lambda e: e.wake_up(tags))

    async def sleep(self) -> None:
        await self._fan_out(lambda e: e.sleep())

    async def reset_prefix_cache(self) -> None:
        await self._fan_out(lambda e: e.reset_prefix_cache())

    async def teardown(self) -> None:
        await asyncio.gather(*(engine.teardown() for engine in self.engines), return_exceptions=True)

    def weight_sync_ranks(self) -> int:
        """Ranks of the engines in service (raises `NoEngineLeftError` when none is)."""
        return sum(self.engines[i].weight_sync_ranks() for i in self._live())

    async def init_weight_update_communicator(self, info: WeightSyncInitInfo) -> None:
        live = self._live()
        ranks = self.engines[live[0]].weight_sync_ranks()
        if any(self.engines[i].weight_sync_ranks() != ranks for i in live):
            raise ValueError("every engine must have the same number of workers (tp x pp x dp) for weight sync")
        await asyncio.gather(
            *(
                self._call(i, lambda e, k=k: e.init_weight_update_communicator(info.for_engine(k, ranks)))
                for k, i in enumerate(live)
            )
        )

    async def update_named_weights(self, request: WeightUpdateRequest) -> None:
        await self._fan_out(lambda e: e.update_named_weights(request))

    async def destroy_weights_update_group(self) -> None:
        await self._fan_out(lambda e: e.destroy_weights_update_group())

    # -- helpers --------------------------------------------------------------------------------------------------

    def _live(self) -> list[int]:
        live = self.in_service
        if not live:
            raise NoEngineLeftError(
                "every inference engine is out of service: "
                + "; ".join(f"engine {i}: {why}" for i, why in sorted(self.dropped.items()))
            )
        return live

    async def _fan_out(self, call: Callable[[InferenceEngineInterface], Awaitable[None]]) -> None:
        """`call` on every engine in service. One that stays unreachable is taken out of service and the call goes
        on with the others (a weight sync must not stop the run for a dead server); `NoEngineLeftError` when none
        is left."""
        results = await asyncio.gather(*(self._call(i, call) for i in self._live()), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, EngineUnavailableError):
                raise result
        self._live()  # raises NoEngineLeftError when the call took the last engine out of service

    async def _call(self, index: int, call: Callable[[InferenceEngineInterface], Awaitable[T]]) -> T:
        try:
            return await call(self.engines[index])
        except EngineUnavailableError as error:
            if index not in self.dropped:
                self.dropped[index] = str(error)
                left = len(self.engines) - len(self.dropped)
                logger.error("inference engine %d is out of service (%s); %d engine(s) left", index, error, left)
            raise


def _pick(values: Sequence | None, rows: list[int]) -> list | None:
    return None if values is None else [values[r] for r in rows]


def _merge(n: int, parts: dict[int, tuple[list[int], InferenceEngineOutput]]) -> InferenceEngineOutput:
    """One output in input order from per-engine outputs of the rows each engine got."""
    responses: list = [None] * n
    response_ids: list = [None] * n
    stop_reasons: list = [None] * n
    logprobs: list | None = [None] * n
    versions: list = [None] * n
    for rows, out in parts.values():
        for k, row in enumerate(rows):
            responses[row] = out["responses"][k]
            response_ids[row] = out["response_ids"][k]
            stop_reasons[row] = out["stop_reasons"][k]
            versions[row] = (out.get("weight_versions") or [None] * len(rows))[k]
            if logprobs is not None:
                engine_logprobs = out.get("response_logprobs")
                if engine_logprobs is None:
                    logprobs = None
                else:
                    logprobs[row] = engine_logprobs[k]
    return InferenceEngineOutput(
        responses=responses,
        response_ids=response_ids,
        stop_reasons=stop_reasons,
        response_logprobs=logprobs,
        weight_versions=versions,
    )
