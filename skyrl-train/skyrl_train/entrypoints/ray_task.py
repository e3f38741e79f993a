"""Upstream SkyRL's `initialize_ray(cfg)` (`skyrl_train.utils.initialize_ray`): the driver's side of its scripts'
``ray.get(skyrl_entrypoint.remote(cfg))``, where a `@ray.remote` task builds and runs `BasePPOExp(cfg)`.

It connects to Ray as `skyrl_train.utils.ray_cluster.init_ray` does: the cluster of ``RAY_ADDRESS`` when it is set,
else a new local cluster with the CPUs (and GPUs) Ray detects, so it starts on a machine without GPUs; token
authentication is Ray's default there (``RAY_AUTH_MODE=disabled`` opts out, as the tests do). Every worker process
of the job first runs `WorkerSetup`:

- it installs the custom advantage estimators and policy losses the driver had registered when it called
  `initialize_ray` (their registries' ``custom_functions``: upstream's scripts register them at module level, code
  the task's process never runs); upstream syncs them through a named actor instead;
- it sets up logging as the command-line entrypoints do (`configure_logging`), so the task's progress is printed.

Registrations made after `initialize_ray` do not reach the workers: make them before it, or in the task.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from skyrl_train.config.registries import AdvantageEstimatorRegistry, PolicyLossRegistry
from skyrl_train.utils.ray_cluster import init_ray

__all__ = ["LOG_FORMAT", "WorkerSetup", "configure_logging", "initialize_ray"]

logger = logging.getLogger(__name__)

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging() -> None:
    """INFO and above to stderr, in the entrypoints' format (a no-op where logging is already set up)."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)


@dataclasses.dataclass(frozen=True)
class WorkerSetup:
    """What Ray's ``worker_process_setup_hook`` of the job runs (pickled with the functions it carries)."""

    advantage_estimators: dict[str, Callable[..., Any]]
    policy_losses: dict[str, Callable[..., Any]]

    @classmethod
    def of_this_process(cls) -> WorkerSetup:
        return cls(AdvantageEstimatorRegistry.custom_functions(), PolicyLossRegistry.custom_functions())

    def __call__(self) -> None:
        configure_logging()
        # Installing loads the registry's built-ins (torch): only in the processes of a job that has custom ones.
        if self.advantage_estimators:
            AdvantageEstimatorRegistry.install(self.advantage_estimators)
        if self.policy_losses:
            PolicyLossRegistry.install(self.policy_losses)


def initialize_ray(cfg: Any = None) -> None:
    """Connect to Ray with `WorkerSetup` run by every worker process of the job (see the module docstring). `cfg` is
    upstream's argument: nothing in it changes how Ray starts here."""
    import ray

    if ray.is_initialized():
        logger.warning(
            "Ray was initialised before initialize_ray: its workers do not get this process's custom advantage "
            "estimators and policy losses"
        )
        return
    setup = WorkerSetup.of_this_process()

    def setup_worker_process() -> None:  # a function: Ray names the hook by its __name__
        setup()

    init_ray(runtime_env={"worker_process_setup_hook": setup_worker_process})
