"""`FullyAsyncPPOTrainer`: generation runs ahead of the policy update by at most k weight versions
(`trainer.fully_async.max_staleness_steps`, upstream SkyRL's name; k = 0 is `PPOTrainer`'s synchronous loop, which
never comes here).

`num_parallel_generation_workers` coroutines each take one prompt, generate its group (`n_samples_per_prompt`
trajectories) on the remote engines and queue it. The trainer takes `train_batch_size` groups in the order they
finished and trains on them in a thread, so the event loop keeps generating during the update; the weights are then
synced to the engines while they generate (`python -m skyrl_train.serve` finishes the requests it is generating, holds
new ones while the sync is applied, then goes on with the new weights).

Staleness (`StalenessBudget`): with the engines at weight version v and the trainer about to train step s + 1 on
policy version s, at most (k + 1 + v - s) x B groups may be generating or waiting, so a group started at version v is
trained by step v + k + 1 when the groups finish in the order they started. A group that finished later than that is
older than k when its step comes: its rows are dropped (`async/stale_groups_dropped`) and its prompt is generated
again, never trained on. The staleness of every trained row (policy version minus the oldest weight version of its
turns) is logged as `async/staleness_mean` / `async/staleness_max`; rows within k are corrected by
`trainer.algorithm.off_policy_correction` against their rollout logprobs (token TIS unless configured otherwise, see
`trainer.fully_async.default_correction`).

Checkpoints store which prompts of the open epochs were trained (`PromptStream.state_dict`), not a loader position:
groups generating or waiting at a checkpoint are not in it, so a resumed run generates them again, and no prompt is
trained twice.

Idle time: `timing/wait_for_rollouts` is the trainer waiting for groups, `async/generation_idle_share` the share of
the step during which no group was generating.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from skyrl_train.dataset import PromptDataLoader
from skyrl_train.tracking import step_progress
from skyrl_train.trainer import TRAINED_PROMPTS_KEY, PPOTrainer, check_infra_failures
from skyrl_train.trainer_utils import Rollouts

logger = logging.getLogger(__name__)

PromptKey = tuple[int, int]
"""(epoch, position in that epoch's order) of one prompt."""


class PromptStream:
    """The training prompts one at a time, in the loader's epoch order (`PromptDataLoader.epoch_order`; epoch e's
    first `len(loader) x batch_size` prompts, as the synchronous loop trains them), with the set of prompts trained.

    `next()` gives the next prompt neither handed out nor trained, prompts given back (`give_back`) first.
    """

    def __init__(self, loader: PromptDataLoader, epochs: int):
        self.loader = loader
        self.epochs = epochs
        self.per_epoch = len(loader) * loader.batch_size
        self.open_epoch = loader.epoch
        """The first epoch with prompts not trained yet."""
        self.trained: set[PromptKey] = set()
        """Trained prompts of `open_epoch` and later."""
        self._cursor: PromptKey = (self.open_epoch, 0)
        self._given_back: deque[PromptKey] = deque()
        self._orders: dict[int, list[int]] = {}
        self._more = asyncio.Event()
        """Set when a prompt is given back."""

    async def take(self) -> tuple[PromptKey, dict[str, list]]:
        """`next()`, waiting for a prompt to be given back when every one has been handed out."""
        while (item := self.next()) is None:
            self._more.clear()
            await self._more.wait()
        return item

    def next(self) -> tuple[PromptKey, dict[str, list]] | None:
        """The next prompt's key and its collated one-row batch; None when every prompt has been handed out."""
        key = self._given_back.popleft() if self._given_back else self._advance()
        if key is None:
            return None
        epoch, position = key
        if epoch not in self._orders:
            self._orders = {epoch: self.loader.epoch_order(epoch)}
        row = self.loader.dataset[self._orders[epoch][position]]
        return key, self.loader.collate_fn([row])

    def give_back(self, key: PromptKey) -> None:
        """`key`'s prompt is handed out again (before any new one)."""
        self._given_back.append(key)
        self._more.set()

    def mark_trained(self, keys: Iterable[PromptKey]) -> None:
        """Record `keys` as trained; epochs whose prompts are all trained close."""
        self.trained.update(keys)
        while self.open_epoch < self.epochs and all(
            (self.open_epoch, p) in self.trained for p in range(self.per_epoch)
        ):
            self.trained = {key for key in self.trained if key[0] != self.open_epoch}
            self.open_epoch += 1

    def state_dict(self) -> dict[str, Any]:
        """The loader's settings at the start of `open_epoch`, and the trained prompts of the open epochs."""
        return {
            **self.loader.state_dict(),
            "epoch": self.open_epoch,
            "position": 0,
            TRAINED_PROMPTS_KEY: sorted(self.trained),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at `state`: an asynchronous one, or a synchronous loader state (its `position` batches of its
        epoch count as trained). Raises `ValueError` when the loader's settings differ (`load_state_dict`)."""
        trained = state.get(TRAINED_PROMPTS_KEY)
        if trained is None:
            done = state["position"] * self.loader.batch_size
            trained = [(state["epoch"], p) for p in range(done)]
        self.loader.load_state_dict({**state, "position": 0})
        self.open_epoch = self.loader.epoch
        self.trained = {(int(epoch), int(position)) for epoch, position in trained}
        self._cursor = (self.open_epoch, 0)
        self._given_back.clear()

    def _advance(self) -> PromptKey | None:
        epoch, position = self._cursor
        while epoch < self.epochs:
            if position == self.per_epoch:
                epoch, position = epoch + 1, 0
                continue
            key = (epoch, position)
            position += 1
            if key not in self.trained:
                self._cursor = (epoch, position)
                return key
        self._cursor = (epoch, position)
        return None


class StalenessBudget:
    """How many groups may be generating or waiting to be trained: ``(k + 1 + synced - step) x groups_per_step``,
    where `synced` is the engines' weight version and `step` the number of steps trained (the policy's version).

    Taking a step's groups (`took_step`) lowers both the count and the limit by `groups_per_step`, so nothing new
    starts until the step's weights are synced (`synced_to`): then the limit rises by one step.
    """

    def __init__(self, max_staleness: int, groups_per_step: int):
        self.max_staleness = max_staleness
        self.groups_per_step = groups_per_step
        self.synced = 0
        self.step = 0
        self.outstanding = 0
        self._changed = asyncio.Condition()

    @property
    def limit(self) -> int:
        return (self.max_staleness + 1 + self.synced - self.step) * self.groups_per_step

    def start(self, step: int) -> None:
        """Begin at `step` (a resumed run's), with the engines at its weights and nothing outstanding."""
        self.synced = self.step = step
        self.outstanding = 0

    async def acquire(self) -> None:
        """Wait until one more group may start, and count it."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.outstanding < self.limit)
            self.outstanding += 1

    async def release(self, groups: int = 1) -> None:
        """`groups` dropped before training: they no longer count."""
        async with self._changed:
            self.outstanding -= groups
            self._changed.notify_all()

    async def took_step(self) -> None:
        """One step's groups are being trained."""
        async with self._changed:
            self.outstanding -= self.groups_per_step
            self.step += 1

    async def synced_to(self, version: int) -> None:
        """The engines now generate with weight version `version`."""
        async with self._changed:
            self.synced = version
            self._changed.notify_all()


@dataclass
class FinishedGroup:
    """One prompt's generated group, as a worker queued it."""

    key: PromptKey
    rollouts: Rollouts


class GenerationActivity:
    """Seconds during which no group was generating, counted since the last `take_idle_seconds`."""

    def __init__(self):
        self.generating = 0
        self._idle_since: float | None = time.perf_counter()
        self._idle = 0.0

    def started(self) -> None:
        if self.generating == 0 and self._idle_since is not None:
            self._idle += time.perf_counter() - self._idle_since
            self._idle_since = None
        self.generating += 1

    def finished(self) -> None:
        self.generating -= 1
        if self.generating == 0:
            self._idle_since = time.perf_counter()

    def take_idle_seconds(self) -> float:
        now = time.perf_counter()
        idle = self._idle + (now - self._idle_since if self._idle_since is not None else 0.0)
        self._idle = 0.0
        if self._idle_since is not None:
            self._idle_since = now
        return idle


def generation_worker_count(trainer_cfg) -> int:
    """Generation coroutines: `num_parallel_generation_workers`, but no more than the groups the staleness budget
    ever lets run at once, (k + 1) x `train_batch_size`."""
    k = trainer_cfg.fully_async.max_staleness_steps
    return min(trainer_cfg.fully_async.num_parallel_generation_workers, (k + 1) * trainer_cfg.train_batch_size)


class FullyAsyncPPOTrainer(PPOTrainer):
    """`PPOTrainer` whose generation overlaps the update (see the module docstring). Its engines are remote
    (`validate_cfg` refuses local ones), so `EngineTurns` has nothing to hand over."""

    def __init__(self, cfg, *args, **kwargs):
        super().__init__(cfg, *args, **kwargs)
        t = cfg.trainer
        self.max_staleness = t.fully_async.max_staleness_steps
        self.prompts = PromptStream(self.train_loader, t.epochs)
        self.budget = StalenessBudget(self.max_staleness, t.train_batch_size)
        self.activity = GenerationActivity()
        self._finished: asyncio.Queue[FinishedGroup | BaseException] | None = None

    async def _train(self) -> None:
        memory = await self._begin()
        self.budget.start(self.global_step)
        self._finished = asyncio.Queue()
        count = generation_worker_count(self.cfg.trainer)
        workers = [asyncio.create_task(self._generation_worker()) for _ in range(count)]
        progress = step_progress(self.total_steps, initial=self.global_step, desc="train")
        try:
            while self.global_step < self.total_steps:
                self.tracker.log({**await self._async_step(), **memory.metrics()}, step=self.global_step)
                progress.update(1)
        finally:
            progress.close()
            for worker in workers:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
        await self._end(memory)

    async def _async_step(self) -> dict[str, Any]:
        """Take the next `train_batch_size` fresh groups, train on them, then the bookkeeping (checkpoint, sync,
        eval); returns the step's metrics."""
        t = self.cfg.trainer
        step_start = time.perf_counter()
        self.activity.take_idle_seconds()  # the idle share counts from here
        metrics: dict[str, Any] = {}
        with self._timer("wait_for_rollouts", metrics):
            groups = await self._take_fresh_groups(t.train_batch_size, metrics)
        self.prompts.mark_trained(group.key for group in groups)
        await self.budget.took_step()
        rollouts = Rollouts.concatenate([group.rollouts for group in groups])
        check_infra_failures(rollouts, t.max_infra_failure_ratio)
        metrics.update(self._rollout_step_metrics(rollouts))
        self.global_step += 1
        metrics.update({"trainer/epoch": min(g.key[0] for g in groups), "trainer/global_step": self.global_step})
        await self._step_and_bookkeeping(rollouts, metrics)
        idle_s = self.activity.take_idle_seconds()  # before the step's end: the share stays <= 1
        metrics["timing/step"] = time.perf_counter() - step_start
        metrics["async/generation_idle_share"] = idle_s / metrics["timing/step"]
        return metrics

    async def train_step(self, rollouts: Rollouts) -> dict[str, Any]:
        """The update in a thread: the event loop goes on generating meanwhile."""
        return await asyncio.to_thread(self.update, rollouts)

    async def _sync_weights(self, weight_version: int) -> None:
        await super()._sync_weights(weight_version)
        await self.budget.synced_to(weight_version)

    def data_state(self) -> dict[str, Any]:
        return self.prompts.state_dict()

    def load_data_state(self, state: dict[str, Any]) -> None:
        self.prompts.load_state_dict(state)

    # ------------------------------------------------------------------------------------------ generation

    async def _generation_worker(self) -> None:
        """Generate one prompt's group at a time, as the budget allows, until cancelled; a failure is queued for
        the trainer to raise."""
        while True:
            key, batch = await self.prompts.take()
            await self.budget.acquire()
            try:
                rollouts = await self._generate_group(batch)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # the trainer raises it
                await self._finished.put(error)
                return
            await self._finished.put(FinishedGroup(key, rollouts))

    async def _generate_group(self, batch: dict[str, list]) -> Rollouts:
        generator_input, uids = self.train_generator_input(batch)
        self.activity.started()
        try:
            output = await self.generator.generate(generator_input)
        finally:
            self.activity.finished()
        return self.postprocessed_rollouts(generator_input, uids, output)

    async def _take_fresh_groups(self, count: int, metrics: dict[str, Any]) -> list[FinishedGroup]:
        """The next `count` finished groups no older than `max_staleness`; older ones are dropped and their prompts
        given back (counted in `async/stale_groups_dropped`)."""
        fresh: list[FinishedGroup] = []
        dropped = 0
        while len(fresh) < count:
            item = await self._finished.get()
            if isinstance(item, BaseException):
                raise item
            if max(self._row_staleness(item.rollouts), default=0) > self.max_staleness:
                dropped += 1
                self.prompts.give_back(item.key)
                await self.budget.release()
                continue
            fresh.append(item)
        metrics["async/stale_groups_dropped"] = dropped
        return fresh

    def _row_staleness(self, rollouts: Rollouts) -> list[int]:
        """Per row with a weight version: the policy's version (the steps trained) minus the oldest weight version
        that generated it. Rows without one generated nothing to train on (an infrastructure failure, or no loss
        token) and have none.

        Raises:
            ValueError: a row with loss tokens and no weight version (its engine reports none): its staleness is
                unknown.
        """
        versions = rollouts.output.get("weight_versions") or [None] * rollouts.num_rows
        failed, masks = rollouts.infra_failed(), rollouts.output["loss_masks"]
        if any(v is None and not failed[i] and any(masks[i]) for i, v in enumerate(versions)):
            raise ValueError(
                "a generated row has no weight version, so its staleness is unknown: asynchronous training "
                "(trainer.fully_async.max_staleness_steps > 0) needs engines that report the weight version of "
                "each sample (python -m skyrl_train.serve does)"
            )
        return [self.global_step - version for version in versions if version is not None]

    def _rollout_step_metrics(self, rollouts: Rollouts) -> dict[str, float]:
        staleness = self._row_staleness(rollouts) or [0]  # no row generated anything: nothing stale either
        metrics = self._generation_metrics([rollouts])
        metrics["generate/rollout_tokens"] = sum(len(ids) for ids in rollouts.output["response_ids"])
        metrics["async/staleness_mean"] = sum(staleness) / len(staleness)
        metrics["async/staleness_max"] = max(staleness)
        return metrics
