"""Scale-out on Ray (``trainer.strategy=fsdp2``); see ``docs/distributed.md``.

- placement.py: ``trainer.placement`` -> placement groups and the bundle of each rank (connecting to Ray and
  reserving a group with a deadline: ``skyrl_train.utils.ray_cluster`` / ``ray_placement``, shared with vLLM);
- actor_group.py: ``ActorGroup`` of ``DistributedActor``s, one per rank of a torch process group;
- fsdp.py: ``shard_model`` (``fully_shard`` per transformer block), device mesh, collectives;
- fsdp_workers.py: the single-process workers on a sharded model (global loss normaliser, metrics, clipping, DCP);
- worker_actors.py / worker_groups.py: the Ray actors (each builds its worker with ``workers.builder.WorkerBuilder``)
  and their driver-side handles with the workers' interface (``workers.protocols``); ``build_fsdp_workers`` is what
  the ``FSDP2`` strategy (``skyrl_train.strategies``) runs;
- sharding.py: how a batch is split over the data-parallel ranks.

Import the submodules directly; importing this package does not import Ray or torch.distributed.
"""
