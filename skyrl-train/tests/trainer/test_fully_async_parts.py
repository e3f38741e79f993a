"""The asynchronous trainer's bookkeeping: which prompts come next and which count as trained (`PromptStream`), how
many groups may run ahead of the policy (`StalenessBudget`) and how many generate at once; and when it is used."""

from __future__ import annotations

import asyncio

import pytest

from skyrl_train.config import load_config
from skyrl_train.dataset import PromptDataLoader
from skyrl_train.entrypoints.main_base import BasePPOExp
from skyrl_train.fully_async_trainer import (
    FullyAsyncPPOTrainer,
    PromptStream,
    StalenessBudget,
    generation_worker_count,
)
from skyrl_train.trainer import TRAINED_PROMPTS_KEY, PPOTrainer

ROWS = [f"row{i}" for i in range(5)]  # batches of 2: 2 per epoch, row 4 left out (drop_last)


def loader() -> PromptDataLoader:
    return PromptDataLoader(ROWS, batch_size=2, shuffle=False, collate_fn=lambda rows: {"prompt": rows})


def take_all(stream: PromptStream) -> list[tuple[tuple[int, int], list[str]]]:
    items = []
    while (item := stream.next()) is not None:
        items.append((item[0], item[1]["prompt"]))
    return items


def test_prompts_come_one_at_a_time_in_epoch_order_over_every_epoch():
    assert take_all(PromptStream(loader(), epochs=2)) == [
        ((0, 0), ["row0"]),
        ((0, 1), ["row1"]),
        ((0, 2), ["row2"]),
        ((0, 3), ["row3"]),
        ((1, 0), ["row0"]),
        ((1, 1), ["row1"]),
        ((1, 2), ["row2"]),
        ((1, 3), ["row3"]),
    ]


def test_a_prompt_given_back_comes_before_any_new_one():
    stream = PromptStream(loader(), epochs=1)
    stream.next(), stream.next()
    stream.give_back((0, 0))
    assert [key for key, _ in take_all(stream)] == [(0, 0), (0, 2), (0, 3)]


def test_the_state_lists_the_trained_prompts_of_the_open_epoch_and_closes_finished_epochs():
    stream = PromptStream(loader(), epochs=2)
    stream.mark_trained([(0, 0), (0, 2)])
    state = stream.state_dict()
    assert (state["epoch"], state["position"], state[TRAINED_PROMPTS_KEY]) == (0, 0, [(0, 0), (0, 2)])

    stream.mark_trained([(0, 1), (0, 3), (1, 1)])
    state = stream.state_dict()
    assert (state["epoch"], state[TRAINED_PROMPTS_KEY]) == (1, [(1, 1)])


def test_a_resumed_stream_hands_out_exactly_the_prompts_not_trained():
    interrupted = PromptStream(loader(), epochs=2)
    for _ in range(4):
        interrupted.next()  # handed out, but only two of them trained before the checkpoint
    interrupted.mark_trained([(0, 1), (0, 3)])
    resumed = PromptStream(loader(), epochs=2)
    resumed.load_state_dict(interrupted.state_dict())
    assert [key for key, _ in take_all(resumed)] == [(0, 0), (0, 2), (1, 0), (1, 1), (1, 2), (1, 3)]


def test_a_synchronous_loader_state_counts_its_batches_as_trained():
    synchronous = loader()
    next(iter(synchronous))  # the first batch of epoch 0 was trained
    stream = PromptStream(loader(), epochs=1)
    stream.load_state_dict(synchronous.state_dict())
    assert [key for key, _ in take_all(stream)] == [(0, 2), (0, 3)]


def test_a_state_of_another_dataset_is_refused_by_the_loader_check():
    stream = PromptStream(loader(), epochs=1)
    state = {**stream.state_dict(), "dataset_size": 7}
    with pytest.raises(ValueError, match="dataset_size=7"):
        PromptStream(loader(), epochs=1).load_state_dict(state)


def test_waiting_for_a_prompt_ends_when_one_is_given_back():
    async def scenario():
        stream = PromptStream(loader(), epochs=1)
        take_all(stream)
        waiting = asyncio.ensure_future(stream.take())
        await asyncio.sleep(0)
        assert not waiting.done()
        stream.give_back((0, 3))
        key, batch = await asyncio.wait_for(waiting, 1)
        return key, batch["prompt"]

    assert asyncio.run(scenario()) == ((0, 3), ["row3"])


async def _admitted(budget: StalenessBudget, tries: int) -> int:
    """How many of `tries` acquisitions go through without waiting."""
    admitted = 0
    for _ in range(tries):
        try:
            await asyncio.wait_for(budget.acquire(), 0.01)
        except TimeoutError:
            break
        admitted += 1
    return admitted


@pytest.mark.parametrize("k, first_limit", [(0, 4), (1, 8), (2, 12)])
def test_the_budget_lets_k_plus_one_steps_of_groups_run_and_one_more_step_per_sync(k, first_limit):
    async def scenario():
        budget = StalenessBudget(k, groups_per_step=4)
        budget.start(step=0)
        before = await _admitted(budget, 20)
        await budget.took_step()  # step 1 trains on 4 of them: nothing new starts during its update
        during_update = await _admitted(budget, 20)
        await budget.synced_to(1)
        after_sync = await _admitted(budget, 20)
        return before, during_update, after_sync

    assert asyncio.run(scenario()) == (first_limit, 0, 4)


def test_dropped_groups_free_their_places():
    async def scenario():
        budget = StalenessBudget(1, groups_per_step=2)
        budget.start(step=3)  # a resumed run: the engines have its weights, nothing outstanding
        full = await _admitted(budget, 10)
        await budget.release(1)
        return full, await _admitted(budget, 10), budget.limit

    assert asyncio.run(scenario()) == (4, 1, 4)


REMOTE = [
    "generator.run_engines_locally=false",
    "generator.remote_inference_engine_urls=[127.0.0.1:8101]",
    "generator.weight_sync_backend=gloo",
    "trainer.train_batch_size=4",
    "trainer.policy_mini_batch_size=4",
]


def test_generation_workers_are_the_setting_capped_by_what_the_budget_lets_run():
    k1 = load_config([*REMOTE, "trainer.fully_async.max_staleness_steps=1"])
    assert generation_worker_count(k1.trainer) == 8  # (1 + 1) x 4 groups, below the default 768
    three = load_config(
        [*REMOTE, "trainer.fully_async.max_staleness_steps=1", "trainer.fully_async.num_parallel_generation_workers=3"]
    )
    assert generation_worker_count(three.trainer) == 3


def test_the_experiment_trains_asynchronously_only_when_k_is_above_zero(tmp_path):
    synchronous = BasePPOExp(load_config([*REMOTE, f"trainer.export_path={tmp_path}"]))
    asynchronous = BasePPOExp(
        load_config([*REMOTE, f"trainer.export_path={tmp_path}", "trainer.fully_async.max_staleness_steps=2"])
    )
    assert (synchronous.get_trainer_class(), asynchronous.get_trainer_class()) == (PPOTrainer, FullyAsyncPPOTrainer)
