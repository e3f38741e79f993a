"""Connecting to Ray: a running cluster when ``RAY_ADDRESS`` is set, else a new local one.

Token authentication (Ray >= 2.60). Ray decides it from ``RAY_AUTH_MODE``, and we leave that decision to Ray and
the user rather than overriding it:

- a *new local* cluster (no ``RAY_ADDRESS``) with ``RAY_AUTH_MODE`` unset gets Ray's default: token auth on, the
  token generated once into ``~/.ray/auth_token`` and read from there by every process of this machine. The head
  listens on the node's address, so the token is what keeps other hosts from submitting work; nothing else is
  needed on one machine. ``RAY_AUTH_MODE=disabled`` opts out (the tests do, so they never write into ``~``);
- a *running* cluster (``RAY_ADDRESS`` set) was started with its own mode; with token auth the driver needs the
  cluster's token (``~/.ray/auth_token`` or ``RAY_AUTH_TOKEN``), exactly as for any Ray client. Ray reports a
  missing or wrong token itself when connecting.
"""

from __future__ import annotations

import logging
import os
from typing import Any

__all__ = ["init_ray", "RAY_ADDRESS_ENV"]

logger = logging.getLogger(__name__)

RAY_ADDRESS_ENV = "RAY_ADDRESS"


def init_ray(
    *,
    num_cpus: int | None = None,
    num_gpus: int | None = None,
    log_to_driver: bool = True,
    runtime_env: dict[str, Any] | None = None,
) -> None:
    """Connect this process to Ray once (a no-op when already connected).

    With ``RAY_ADDRESS`` set, connect to that cluster (``num_cpus`` / ``num_gpus`` must then be None: a running
    cluster's resources are its own). Otherwise start a local cluster with ``num_cpus`` / ``num_gpus`` (None: what
    Ray detects; ``address="local"``, so a cluster that another user started on this machine with ``ray start``
    is never joined by accident). Worker stdout/stderr (their log records) are forwarded to this process with ``log_to_driver``.
    ``runtime_env`` is the job's Ray runtime environment (every worker process of this driver's job gets it).
    """
    import ray

    if ray.is_initialized():
        return
    address = os.environ.get(RAY_ADDRESS_ENV)
    if address:
        if num_cpus is not None or num_gpus is not None:
            raise ValueError(
                f"{RAY_ADDRESS_ENV}={address} names a running cluster, whose resources cannot be set from here "
                f"(got num_cpus={num_cpus}, num_gpus={num_gpus})"
            )
        logger.info("connecting to the Ray cluster at %s", address)
        ray.init(address=address, log_to_driver=log_to_driver, runtime_env=runtime_env)
        return
    logger.info("starting a local Ray cluster (num_cpus=%s, num_gpus=%s)", num_cpus, num_gpus)
    ray.init(
        address="local",
        num_cpus=num_cpus,
        num_gpus=num_gpus,
        include_dashboard=False,
        log_to_driver=log_to_driver,
        runtime_env=runtime_env,
    )
