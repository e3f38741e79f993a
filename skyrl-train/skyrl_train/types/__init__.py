"""Types shared across layers: the bottom of the import graph (see ``tests/test_layers.py``).

- sampling.py: `SamplingParams` (also the schema of `generator.sampling_params`), the extra keys each backend reads;
- weight_version.py: `WeightVersion`, the counter of a module's weight changes (KV caches and rollouts are keyed by it);
- weight_sync_requests.py: the weight-update requests the trainer sends engines (JSON round trip);
- weight_sync_init_info.py: `WeightSyncInitInfo`, where the trainer and the engines form the weight-update group.

Stop reasons are `skyrl_gym.common.stop_reasons.StopReason` (the env package's, shared with the integrations).
Import the submodules directly: importing this package imports nothing, so the config can use `sampling` without
loading torch.
"""
