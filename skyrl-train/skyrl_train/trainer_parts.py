"""What `PPOTrainer` trains with beyond upstream SkyRL's trainer arguments, handed from the `BasePPOExp` building a run
to the trainer its `get_trainer` hook builds.

Upstream's hook is `get_trainer(cfg, tracker, tokenizer, train_dataset, eval_dataset, inference_engine_client,
generator, colocate_pg)`, and a script's override builds its trainer subclass from exactly these
(`RayPPOTrainer(cfg=cfg, ...)`); upstream's trainer then builds its loaders and models itself. Here the strategy builds
the workers before the engine (a local engine generates with the policy's module) and the run owns the checkpoints
and S3 uploads, so `BasePPOExp` builds them first and makes them the `current` parts while `get_trainer` runs; the
trainer takes them from there (`skyrl_train.trainer.RayPPOTrainer`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skyrl_train.checkpoints import CheckpointManager
    from skyrl_train.dataset import PromptDataLoader
    from skyrl_train.inference_engines.base import InferenceEngineInterface
    from skyrl_train.storage import EvalDumpUploader
    from skyrl_train.workers.protocols import Workers

__all__ = ["TrainerParts", "building_trainer", "current"]


@dataclasses.dataclass(frozen=True)
class TrainerParts:
    train_loader: PromptDataLoader
    eval_loader: PromptDataLoader | None
    workers: Workers
    sync_weights: Callable[[int], Awaitable[None]]
    inference_engine: InferenceEngineInterface | None
    """The engine the trainer hands turns to (a local one), or None (remote servers only receive the syncs)."""
    checkpoints: CheckpointManager
    eval_dumps: EvalDumpUploader | None

    def trainer_kwargs(self) -> dict[str, Any]:
        """`PPOTrainer`'s keyword arguments for these parts."""
        return {
            "train_loader": self.train_loader,
            "eval_loader": self.eval_loader,
            "policy": self.workers.policy,
            "ref": self.workers.ref,
            "critic": self.workers.critic,
            "sync_weights": self.sync_weights,
            "inference_engine": self.inference_engine,
            "checkpoints": self.checkpoints,
            "eval_dumps": self.eval_dumps,
        }


_CURRENT: ContextVar[TrainerParts | None] = ContextVar("skyrl_trainer_parts", default=None)


@contextlib.contextmanager
def building_trainer(parts: TrainerParts) -> Iterator[None]:
    """`parts` are `current()` inside the block."""
    token = _CURRENT.set(parts)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current() -> TrainerParts:
    """The parts of the run being built.

    Raises:
        RuntimeError: outside `building_trainer` (a trainer built from upstream's arguments anywhere but in
            `BasePPOExp.get_trainer`).
    """
    parts = _CURRENT.get()
    if parts is None:
        raise RuntimeError(
            "a trainer built from upstream's arguments (RayPPOTrainer(cfg=..., tracker=..., ...)) gets its workers, "
            "loaders and weight sync from the BasePPOExp building the run, so it can only be built in "
            "BasePPOExp.get_trainer; elsewhere build PPOTrainer with its own arguments"
        )
    return parts
