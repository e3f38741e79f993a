"""DAPO dynamic sampling: which groups are dropped or replaced, how many batches are drawn, and the metrics.

Rollouts are written out by hand: each group is a prompt uid with its samples' rewards (scalar returns).
"""

from __future__ import annotations

import pytest

from skyrl_train.config.schema import DynamicSamplingConfig
from skyrl_train.dynamic_sampling import DynamicSampler, groups_with_signal
from skyrl_train.generators.base import GeneratorOutput
from skyrl_train.trainer_utils import Rollouts


def rollouts(groups: dict[str, list[float]], failed: frozenset[tuple[str, int]] = frozenset()) -> Rollouts:
    """One row per sample; sample k of group `uid` has response ids [k] and the given reward."""
    uids, rewards, stop_reasons = [], [], []
    for uid, samples in groups.items():
        for k, reward in enumerate(samples):
            uids.append(uid)
            rewards.append([reward])
            stop_reasons.append("env_init_failed" if (uid, k) in failed else "stop")
    rows = len(uids)
    output = GeneratorOutput(
        prompt_token_ids=[[1]] * rows,
        response_ids=[[k] for k in range(rows)],
        rewards=rewards,
        loss_masks=[[1]] * rows,
        stop_reasons=stop_reasons,
        rollout_logprobs=None,
        env_metrics=[{}] * rows,
    )
    return Rollouts(output, uids, ["env"] * rows, [{"data_source": "src"}] * rows)


def groups_of(batch: Rollouts) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for uid, reward in zip(batch.uids, batch.output["rewards"], strict=True):
        out.setdefault(uid, []).append(reward[0])
    return out


def sampler(kind: str, train_batch_size: int = 2, **config) -> DynamicSampler:
    return DynamicSampler(DynamicSamplingConfig(type=kind, **config), train_batch_size, seed=0)


def test_a_group_has_signal_when_two_completed_samples_differ():
    batch = rollouts(
        {"varied": [1.0, 0.0], "equal": [1.0, 1.0], "one_left": [1.0, 0.0], "alone": [1.0]},
        failed=frozenset({("one_left", 1)}),
    )
    assert groups_with_signal(batch) == {"varied": True, "equal": False, "one_left": False, "alone": False}


def test_filter_drops_equal_reward_groups_and_draws_more():
    ds = sampler("filter", train_batch_size=2, max_sample_batches=5)
    # Half the groups of each drawn batch have equal rewards.
    assert ds.add(rollouts({"a": [1.0, 0.0], "b": [1.0, 1.0]})) is None  # 1 of 2 groups collected: draw more
    batch = ds.add(rollouts({"c": [0.0, 0.0], "d": [0.0, 0.5]}))
    assert batch is not None
    assert groups_of(batch) == {"a": [1.0, 0.0], "d": [0.0, 0.5]}
    assert batch.output["response_ids"] == [[0], [1], [2], [3]]  # the groups' own rows, in order
    assert ds.metrics() == {
        "dynamic_sampling/batches_drawn": 2.0,
        "dynamic_sampling/groups_dropped": 2.0,
        "dynamic_sampling/groups_replaced": 0.0,
    }


def test_filter_keeps_exactly_train_batch_size_groups_and_starts_over():
    ds = sampler("filter", train_batch_size=2)
    batch = ds.add(rollouts({"a": [1.0, 0.0], "b": [0.0, 1.0], "c": [0.5, 0.0]}))
    assert list(groups_of(batch)) == ["a", "b"]
    assert ds.metrics()["dynamic_sampling/batches_drawn"] == 1.0
    assert ds.add(rollouts({"d": [1.0, 0.0]})) is None  # the next training batch collects from zero


def test_max_sample_batches_stops_with_error():
    ds = sampler("filter", train_batch_size=2, max_sample_batches=2)
    assert ds.add(rollouts({"a": [1.0, 1.0], "b": [0.0, 1.0]})) is None
    with pytest.raises(RuntimeError, match=r"max_sample_batches=2 .* \(1 collected, 3 groups without signal dropped\)"):
        ds.add(rollouts({"c": [0.0, 0.0], "d": [1.0, 1.0]}))


def test_replace_swaps_equal_reward_groups_for_copies_of_groups_with_signal():
    ds = sampler("replace", train_batch_size=4, min_replace_ratio=0.5)
    batch = ds.add(rollouts({"a": [1.0, 0.0], "b": [1.0, 1.0], "c": [0.0, 0.5], "d": [0.0, 0.0]}))
    groups = groups_of(batch)
    assert list(groups)[0] == "a" and list(groups)[2] == "c"
    copies = {uid: rewards for uid, rewards in groups.items() if "#copy_of_" in uid}
    assert sorted(uid.split("#")[0] for uid in copies) == ["b", "d"]  # each replaced group keeps its slot
    for uid, rewards in copies.items():
        source = uid.split("#copy_of_")[1]
        assert rewards == groups[source]  # a copy of a group with signal, under its own uid
    assert batch.num_rows == 8
    assert ds.metrics() == {
        "dynamic_sampling/batches_drawn": 1.0,
        "dynamic_sampling/groups_dropped": 0.0,
        "dynamic_sampling/groups_replaced": 2.0,
    }


def test_replace_below_min_ratio_resamples():
    ds = sampler("replace", train_batch_size=4, min_replace_ratio=0.5)
    # 1 of 4 groups has signal (0.25 < 0.5): the batch is discarded and another one drawn.
    assert ds.add(rollouts({"a": [1.0, 0.0], "b": [1.0, 1.0], "c": [0.0, 0.0], "d": [0.5, 0.5]})) is None
    batch = ds.add(rollouts({"e": [1.0, 0.0], "f": [0.0, 1.0], "g": [0.0, 0.5], "h": [1.0, 1.0]}))
    assert [uid for uid in groups_of(batch) if "#" not in uid] == ["e", "f", "g"]
    assert ds.metrics() == {
        "dynamic_sampling/batches_drawn": 2.0,
        "dynamic_sampling/groups_dropped": 3.0,
        "dynamic_sampling/groups_replaced": 1.0,
    }


def test_step_wise_groups_are_judged_by_whole_trajectory_returns():
    # Group "a": trajectory 0 has two turns rewarded 0.5 + 0.5, trajectory 1 one turn rewarded 1.0: equal returns.
    batch = rollouts({"a": [0.5, 0.5, 1.0], "b": [0.0, 1.0]})
    batch.output["is_last_step"] = [False, True, True, True, True]
    assert groups_with_signal(batch) == {"a": False, "b": True}


def test_filter_keeps_a_prompt_drawn_again_in_a_new_epoch_as_its_own_group():
    ds = sampler("filter", train_batch_size=2)
    assert ds.add(rollouts({"a": [1.0, 0.0]})) is None
    batch = ds.add(rollouts({"a": [0.0, 0.5]}))  # the same prompt uid, from the next epoch
    assert groups_of(batch) == {"a": [1.0, 0.0], "a#draw2": [0.0, 0.5]}
