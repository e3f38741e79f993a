"""Per-request sampling seeds: reproducible rollouts whatever the engine's batching.

The generator runs many agent loops at once and the engine batches their requests as they arrive, so which request
shares a forward pass with which, and in what order, depends on thread timing (env steps, tool servers). With one
engine-wide RNG, every request's random draws would depend on that order. A request with its own seed draws from its
own generator instead (`HFInferenceEngine`; vLLM's per-request generators; remote servers get the seed in the request
body), so its tokens depend only on its seed and its logits.

When `generator.sampling_params.seed` (or `eval_sampling_params.seed`) is null, each generation call of a trajectory
gets the seed `request_seed` derives from `trainer.seed` and the call's identity: the phase (train or eval), the global
step, the prompt's uid, the sample's index within its group and the turn (train and eval batches carry all of these;
`trajectory_seeds` says where no seed is derived). An explicit seed keeps its meaning: every request gets exactly that
seed.

The identity holds no draw count: a prompt drawn twice for one step (dynamic sampling that crosses an epoch boundary)
samples the same tokens both times. It holds no weight version either: a resumed run, with the same weights, samples
what the uninterrupted one would have.

What this does not cover: batched forward passes of different batch compositions (padding, prefix-cache hits, the
shared-prefix decode path) can differ in the last bits of the logits, and a sample whose uniform lands within that
distance of a token boundary (or a greedy near-tie) then picks another token.
"""

from __future__ import annotations

import dataclasses
import hashlib

from skyrl_train.generators.base import BatchMetadata, TrajectoryID
from skyrl_train.inference_engines.base import SamplingParams

SEED_LIMIT = 2**31
"""Derived seeds are in [0, SEED_LIMIT): they fit any server's 32-bit signed seed, and torch's CPU generator keeps only
the low 32 bits of a seed anyway."""


def request_seed(base_seed: int, phase: str, global_step: int | None, trajectory_id: TrajectoryID, turn: int) -> int:
    """The seed of turn `turn` (0-based) of trajectory `trajectory_id` in the `phase` batch of `global_step`, a
    hash of these and `base_seed` (`trainer.seed`): the same on every machine and in every process."""
    key = f"{base_seed}/{phase}/{global_step}/{trajectory_id.instance_id}/{trajectory_id.repetition_id}/{turn}"
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % SEED_LIMIT


@dataclasses.dataclass(frozen=True)
class TrajectorySeeds:
    """The identity of one trajectory's generation calls; `for_turn` gives each call's seed."""

    base_seed: int
    phase: str
    global_step: int | None
    trajectory_id: TrajectoryID

    def for_turn(self, turn: int) -> int:
        return request_seed(self.base_seed, self.phase, self.global_step, self.trajectory_id, turn)


def trajectory_seeds(
    base_seed: int | None,
    sampling_params: SamplingParams,
    trajectory_ids: list[TrajectoryID | None],
    batch_metadata: BatchMetadata | None,
) -> list[TrajectorySeeds | None]:
    """Per trajectory of a batch, its `TrajectorySeeds`, or None where the requests keep `sampling_params` as they
    are: an explicit `sampling_params.seed`, no `base_seed`, no batch metadata, or a row without a trajectory id (the
    engine's own RNG then samples it)."""
    if base_seed is None or sampling_params.seed is not None or batch_metadata is None:
        return [None] * len(trajectory_ids)
    phase, step = batch_metadata.training_phase, batch_metadata.global_step
    return [None if tid is None else TrajectorySeeds(base_seed, phase, step, tid) for tid in trajectory_ids]
