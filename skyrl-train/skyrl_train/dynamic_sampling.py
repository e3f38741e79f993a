"""DAPO dynamic sampling (`trainer.algorithm.dynamic_sampling`): train only on prompt groups that carry a signal.

A group (the `n_samples_per_prompt` trajectories of one prompt) whose completed trajectories all have the same
return gets zero advantage under any group baseline: it costs a forward and backward pass and teaches nothing.
A group "has signal" when at least two of its trajectories completed (infrastructure failures are out of the
baseline) and their returns are not all equal.

- `filter`: drop the groups without signal and draw further prompt batches until `train_batch_size` groups with
  signal are collected; the training batch is their first `train_batch_size` (the rest are discarded, as
  upstream does, since their rollouts would be off-policy by the next step).
- `replace`: if at least `min_replace_ratio` of a drawn batch's groups have signal, each group without signal is
  replaced by a copy of a randomly chosen group with signal (under its own uid, so it forms its own group); else
  the batch is discarded and another one is drawn.

Either way, if `max_sample_batches` batches have been drawn for one training batch and it is still not full, the
run stops with an error that says so. Metrics per training step: `dynamic_sampling/batches_drawn`,
`dynamic_sampling/groups_dropped` (groups without signal left out), `dynamic_sampling/groups_replaced`.
"""

from __future__ import annotations

import random
from collections import defaultdict

from skyrl_gym.common.outcomes import trajectory_return
from skyrl_train.config.schema import DynamicSamplingConfig
from skyrl_train.trainer_utils import Rollouts

__all__ = ["DynamicSampler", "groups_with_signal"]


def groups_with_signal(rollouts: Rollouts) -> dict[str, bool]:
    """Prompt uid -> whether its group has signal (see the module doc), in order of first appearance."""
    returns: dict[str, list[float]] = {}
    failed = rollouts.infra_failed()
    for i, reward in zip(rollouts.trajectory_rows(), rollouts.trajectory_rewards(), strict=True):
        values = returns.setdefault(rollouts.uids[i], [])
        if not failed[i]:
            values.append(trajectory_return(reward))
    return {uid: len(values) >= 2 and len(set(values)) > 1 for uid, values in returns.items()}


class DynamicSampler:
    """Collects generated groups across prompt batches until one training batch is full.

    `add(rollouts)` takes the rollouts of one drawn prompt batch and returns the training batch once it is full,
    else None (draw another batch). `metrics()` describes the batch returned last.
    """

    def __init__(self, config: DynamicSamplingConfig, train_batch_size: int, seed: int):
        if config.type not in ("filter", "replace"):
            raise ValueError(
                f"trainer.algorithm.dynamic_sampling.type must be 'filter' or 'replace', got {config.type!r}"
            )
        self.config = config
        self.train_batch_size = train_batch_size
        self._rng = random.Random(seed)
        self._kept: list[Rollouts] = []
        self._kept_groups = 0
        self._drawn = self._dropped = self._replaced = 0
        self._metrics: dict[str, float] = {}

    def add(self, rollouts: Rollouts) -> Rollouts | None:
        self._drawn += 1
        signal = groups_with_signal(rollouts)
        batch = self._filter(rollouts, signal) if self.config.type == "filter" else self._replace(rollouts, signal)
        if batch is not None:
            self._metrics = {
                "dynamic_sampling/batches_drawn": float(self._drawn),
                "dynamic_sampling/groups_dropped": float(self._dropped),
                "dynamic_sampling/groups_replaced": float(self._replaced),
            }
            self._kept, self._kept_groups = [], 0
            self._drawn = self._dropped = self._replaced = 0
            return batch
        if self._drawn >= self.config.max_sample_batches:
            raise RuntimeError(
                f"dynamic sampling ({self.config.type!r}) drew trainer.algorithm.dynamic_sampling.max_sample_batches="
                f"{self.config.max_sample_batches} prompt batches without filling one training batch of "
                f"{self.train_batch_size} prompts whose samples differ in reward ({self._kept_groups} collected, "
                f"{self._dropped} groups without signal dropped): rewards have no variance within groups. Raise "
                "generator.n_samples_per_prompt or the sampling temperature, or make the reward less sparse."
            )
        return None

    def metrics(self) -> dict[str, float]:
        return dict(self._metrics)

    def _filter(self, rollouts: Rollouts, signal: dict[str, bool]) -> Rollouts | None:
        keep = [uid for uid, has_signal in signal.items() if has_signal]
        self._dropped += len(signal) - len(keep)
        kept = _groups(rollouts, keep)
        collected = {uid for part in self._kept for uid in part.uids}
        if collected & set(keep):  # the same prompt drawn again (a new epoch began): keep the two groups apart
            kept = kept.select(
                range(kept.num_rows),
                uids=[f"{uid}#draw{self._drawn}" if uid in collected else uid for uid in kept.uids],
            )
        self._kept.append(kept)
        self._kept_groups += len(keep)
        if self._kept_groups < self.train_batch_size:
            return None
        collected = Rollouts.concatenate(self._kept)
        return _groups(collected, list(dict.fromkeys(collected.uids))[: self.train_batch_size])

    def _replace(self, rollouts: Rollouts, signal: dict[str, bool]) -> Rollouts | None:
        good = [uid for uid, has_signal in signal.items() if has_signal]
        if not good or len(good) / len(signal) < self.config.min_replace_ratio:
            self._dropped += len(signal) - len(good)
            return None
        parts = []
        for uid, has_signal in signal.items():
            if has_signal:
                parts.append(_groups(rollouts, [uid]))
                continue
            self._replaced += 1
            copy = _groups(rollouts, [self._rng.choice(good)])
            parts.append(copy.select(range(copy.num_rows), uids=[f"{uid}#copy_of_{u}" for u in copy.uids]))
        return Rollouts.concatenate(parts)


def _groups(rollouts: Rollouts, uids: list[str]) -> Rollouts:
    """The rows of the given groups, group by group in the order of `uids`."""
    rows_of: dict[str, list[int]] = defaultdict(list)
    for i, uid in enumerate(rollouts.uids):
        rows_of[uid].append(i)
    return rollouts.select([i for uid in uids for i in rows_of[uid]])
