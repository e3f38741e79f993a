"""A group of Ray actors, one per rank of a torch process group, placed by a ``ReservedPlacement``.

``DistributedActor`` is the base of every worker actor: it knows its rank, reports where it runs and joins the
process group (gloo on CPU, NCCL on GPU). ``ActorGroup`` creates the actors (``ray.remote`` applied to a plain
class, so the same class is importable and testable without Ray), starts the process group and calls a method on
every rank.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence
from typing import Any

from skyrl_train.distributed.placement import ReservedPlacement, remove_placement_groups

__all__ = ["ActorGroup", "DistributedActor"]

logger = logging.getLogger(__name__)


class DistributedActor:
    """One rank: ``init_process_group`` joins the torch process group of its ``ActorGroup``."""

    def __init__(self, rank: int, world_size: int):
        self.rank = rank
        self.world_size = world_size
        logging.basicConfig(
            level=logging.INFO, format=f"%(asctime)s %(levelname)s [rank {rank}] %(name)s: %(message)s", force=True
        )

    @property
    def device(self) -> str:
        """``cuda`` when Ray gave this actor a GPU that torch can use, else ``cpu``."""
        import ray
        import torch

        return "cuda" if ray.get_gpu_ids() and torch.cuda.is_available() else "cpu"

    def placement_info(self) -> dict[str, Any]:
        """Where this rank runs: node id, GPU ids Ray assigned, ``CUDA_VISIBLE_DEVICES`` and resources held."""
        import ray

        context = ray.get_runtime_context()
        return {
            "rank": self.rank,
            "node_id": context.get_node_id(),
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "resources": context.get_assigned_resources(),
        }

    def master_address(self) -> tuple[str, int]:
        """This node's address and a free TCP port, for rank 0 to host the process group's store."""
        import ray

        address = ray.util.get_node_ip_address()
        with socket.socket() as sock:
            sock.bind(("", 0))
            port = sock.getsockname()[1]
        return address, port

    def init_process_group(self, master_addr: str, master_port: int) -> None:
        import torch
        import torch.distributed as dist

        backend = "nccl" if self.device == "cuda" else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(0)  # Ray exposes exactly this actor's GPU(s) through CUDA_VISIBLE_DEVICES
        dist.init_process_group(
            backend, init_method=f"tcp://{master_addr}:{master_port}", rank=self.rank, world_size=self.world_size
        )
        logger.info("joined the %s process group (%d ranks)", backend, self.world_size)


class ActorGroup:
    """``placement.world_size`` actors of ``actor_cls`` (a ``DistributedActor`` subclass); rank r in bundle
    ``placement.bundle_of_rank[r]``, asking for ``placement.share`` of it. ``kwargs`` go to every constructor."""

    def __init__(self, actor_cls: type[DistributedActor], placement: ReservedPlacement, **kwargs: Any):
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        remote_cls = ray.remote(actor_cls)
        self.placement_group = placement.placement_group
        self.world_size = placement.world_size
        self.actors = [
            remote_cls.options(
                num_cpus=placement.share,
                num_gpus=placement.share if placement.use_gpu else 0,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement.placement_group, placement_group_bundle_index=bundle
                ),
            ).remote(rank=rank, world_size=self.world_size, **kwargs)
            for rank, bundle in enumerate(placement.bundle_of_rank)
        ]

    def init_process_group(self) -> None:
        """Join all ranks into one torch process group, hosted by rank 0."""
        import ray

        master_addr, master_port = ray.get(self.actors[0].master_address.remote())
        ray.get([actor.init_process_group.remote(master_addr, master_port) for actor in self.actors])

    def run(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Call ``method(*args, **kwargs)`` on every rank at once; the results in rank order."""
        import ray

        return ray.get([getattr(actor, method).remote(*args, **kwargs) for actor in self.actors])

    def run_per_rank(self, method: str, per_rank_args: Sequence[tuple], **kwargs: Any) -> list[Any]:
        """Call ``method(*per_rank_args[r], **kwargs)`` on rank r, all at once; the results in rank order."""
        import ray

        if len(per_rank_args) != self.world_size:
            raise ValueError(f"{len(per_rank_args)} argument tuples for {self.world_size} ranks")
        return ray.get(
            [
                getattr(actor, method).remote(*args, **kwargs)
                for actor, args in zip(self.actors, per_rank_args, strict=True)
            ]
        )

    def kill(self) -> None:
        """Kill the actors and release their placement group (groups sharing it release it once)."""
        import ray

        for actor in self.actors:
            ray.kill(actor)
        remove_placement_groups([self.placement_group])
