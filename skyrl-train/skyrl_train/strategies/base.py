"""The `Strategy` interface: how a run's workers are built, released and reach a local inference engine."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from skyrl_train.utils.device import precision, resolve_device

if TYPE_CHECKING:
    from skyrl_train.config.schema import SkyRLConfig
    from skyrl_train.storage import S3Settings
    from skyrl_train.workers.protocols import Policy, Workers

__all__ = ["EnginePolicy", "Strategy"]


class EnginePolicy(NamedTuple):
    """What a local inference engine generates from, and how that stays equal to the trained policy."""

    policy: Any
    """The policy as the engine sees it: one whose ``model`` lives in this process (the hf engine generates from
    it), or the policy itself (vLLM engines colocate with an fsdp2 policy's actors and receive weight syncs)."""
    refresh: Callable[[], None] | None
    """Brings ``policy``'s weights up to date after an update (the weight sync calls it); None: nothing to do."""


class Strategy(ABC):
    """How ``trainer.strategy`` runs the workers: built (``build_workers``), released (``release_workers``), seen by a
    local engine (``engine_policy``), and the device and dtype of the models this process holds.

    ``s3`` (the run's S3 settings, or None) and ``checkpoints`` (the run saves or resumes checkpoints) tell a strategy
    whose ranks write their own checkpoint files where those can go; a strategy in this process does not need them.

    Raises:
        ValueError: ``trainer.device`` names a device this process cannot use (``utils.device.resolve_device``).
    """

    name: ClassVar[str]
    """The ``trainer.strategy`` value."""
    driver_models: ClassVar[str]
    """The models of this process that run on ``device`` (for the start-up log line)."""

    def __init__(self, cfg: SkyRLConfig, *, s3: S3Settings | None = None, checkpoints: bool = False):
        self.cfg = cfg
        self.s3 = s3
        self.checkpoints = checkpoints
        self.device = resolve_device(cfg.trainer.device)
        """Where this process's models live (``trainer.device``): single-process workers, a local hf engine's model."""
        self.precision = precision(cfg.trainer.bf16, self.device)
        """How they hold their weights and compute (``trainer.bf16``, `utils.device.precision`)."""
        self.dtype = self.precision.weights
        """Their weights' dtype."""

    @abstractmethod
    def build_workers(self, num_training_steps: int | None) -> Workers:
        """The policy, the reference (when a KL term is on, else None) and the critic (when
        ``trainer.critic.model.path`` is set, else None); ``num_training_steps``: optimizer steps of the whole run."""

    @abstractmethod
    def release_workers(self, workers: Workers) -> None:
        """Free what ``build_workers`` holds beyond this process (called however the run ends)."""

    @abstractmethod
    def engine_policy(self, policy: Policy) -> EnginePolicy:
        """How a local engine gets ``policy``'s weights."""

    def engine_placement(self, policy: Policy | None) -> tuple[Any, list[int]] | None:
        """Where colocated vLLM engines go: the policy's placement group and the bundle of each rank, or None when
        the policy's workers hold no placement group (this process) or there is no policy (an eval-only run)."""
        return None
