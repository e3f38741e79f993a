"""Step-wise training: every turn is its own row; the trajectory's advantage is broadcast to all its turns."""

from __future__ import annotations

import json

import pytest
import torch

from skyrl_gym.envs.gsm8k.synthetic_data import generate_dataset, write_dataset
from skyrl_train.algorithms import compute_step_wise_advantages, trajectory_index
from skyrl_train.config import load_config
from skyrl_train.dynamic_sampling import groups_with_signal
from skyrl_train.entrypoints.main_base import BasePPOExp
from skyrl_train.generators.base import GeneratorOutput
from skyrl_train.trainer_utils import Rollouts, reward_metrics


def test_trajectory_index_counts_last_steps():
    assert trajectory_index([False, False, True, True, False, True]).tolist() == [0, 0, 0, 1, 2, 2]


def test_step_wise_advantage_broadcast_hand_computed():
    # Prompt "p": trajectory A has two turns (rewards 0.2 then 1.0: return 1.2), trajectory B one turn (return 0).
    # Prompt "q": trajectory C has two turns (0 then 0.5), trajectory D two turns (0.5 then 0): equal returns.
    rewards = torch.tensor(
        [
            [0.0, 0.2, 0.0],  # A, turn 1
            [1.0, 0.0, 0.0],  # A, turn 2 (last)
            [0.0, 0.0, 0.0],  # B (last)
            [0.0, 0.0, 0.0],  # C, turn 1
            [0.0, 0.5, 0.0],  # C, turn 2 (last)
            [0.5, 0.0, 0.0],  # D, turn 1
            [0.0, 0.0, 0.0],  # D, turn 2 (last)
        ]
    )
    response_mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 0]])
    advantages, returns = compute_step_wise_advantages(
        "grpo",
        token_level_rewards=rewards,
        response_mask=response_mask,
        index=["p", "p", "p", "q", "q", "q", "q"],
        is_last_step=[False, True, True, False, True, False, True],
        grpo_norm_by_std=True,
    )
    # p: mean 0.6, unbiased std sqrt(2 x 0.36 / 1) = 0.6 sqrt(2): A = ±1/sqrt(2) (epsilon 1e-6 aside).
    a = 0.6 / (0.6 * 2**0.5 + 1e-6)
    expected = torch.tensor([[a, a, 0.0], [a, 0.0, 0.0], [-a, -a, -a], [0.0] * 3, [0.0] * 3, [0.0] * 3, [0.0] * 3])
    assert torch.allclose(advantages, expected, atol=1e-6)
    assert torch.equal(returns, advantages)


def test_step_wise_baseline_mask_is_taken_from_each_trajectorys_last_row():
    # Trajectory B failed (infrastructure): it is out of the baseline, so A is a singleton group (mean 0, std 1).
    advantages, _ = compute_step_wise_advantages(
        "grpo",
        token_level_rewards=torch.tensor([[0.5], [0.5], [0.0]]),
        response_mask=torch.ones(3, 1),
        index=["p", "p", "p"],
        is_last_step=[False, True, True],
        baseline_mask=torch.tensor([True, True, False]),
    )
    assert torch.allclose(advantages.squeeze(-1), torch.tensor([1.0, 1.0, 0.0]), atol=1e-5)


def test_step_wise_refuses_gae():
    with pytest.raises(ValueError, match="gae"):
        compute_step_wise_advantages(
            "gae",
            token_level_rewards=torch.zeros(1, 1),
            response_mask=torch.ones(1, 1),
            index=["p"],
            is_last_step=[True],
        )


def test_gsm8k_multi_turn_trains_three_steps_step_wise(tmp_path, tiny_model):
    write_dataset(generate_dataset(train_size=6, val_size=2, seed=3, few_shot=0), tmp_path / "data")
    exports = tmp_path / "exports"
    cfg = load_config(
        [
            f"data.train_data=[{tmp_path / 'data' / 'train.parquet'}]",
            f"data.val_data=[{tmp_path / 'data' / 'validation.parquet'}]",
            "environment.env_class=gsm8k_multi_turn",
            f"trainer.policy.model.path={tiny_model}",
            "generator.step_wise_trajectories=true",
            "generator.max_turns=2",
            "generator.max_input_length=1024",
            "trainer.train_batch_size=2",
            "trainer.policy_mini_batch_size=1",
            "trainer.micro_train_batch_size_per_gpu=2",
            "trainer.micro_forward_batch_size_per_gpu=4",
            "generator.n_samples_per_prompt=2",
            "generator.sampling_params.max_generate_length=4",
            "generator.eval_sampling_params.max_generate_length=4",
            "trainer.max_prompt_length=512",
            "trainer.bf16=false",
            "trainer.gradient_checkpointing=false",
            "trainer.algorithm.use_kl_loss=false",
            "trainer.eval_interval=3",
            "trainer.eval_before_train=false",
            "trainer.ckpt_interval=-1",
            "trainer.logger=jsonl",
            f"trainer.ckpt_path={tmp_path / 'ckpts'}",
            f"trainer.export_path={exports}",
        ]
    )
    updates = []

    class Experiment(BasePPOExp):
        def get_workers(self, num_training_steps):
            policy, ref, critic = super().get_workers(num_training_steps)
            ppo_train = policy.ppo_train

            def recorded(batch, mini_batch_size, *args, **kwargs):
                updates.append((batch.batch_size, int(batch["is_last_step"].sum()), mini_batch_size))
                return ppo_train(batch, mini_batch_size, *args, **kwargs)

            policy.ppo_train = recorded
            return policy, ref, critic

    Experiment(cfg).run()
    steps = [json.loads(line) for line in (exports / "metrics.jsonl").read_text().splitlines()]
    train = [s for s in steps if "trainer/global_step" in s]
    assert [s["trainer/global_step"] for s in train] == [1, 2, 3]
    assert len(updates) == 3
    for rows, trajectories, mini_batch_rows in updates:
        assert trajectories == 4  # 2 prompts x 2 samples, each counted once ...
        assert 4 <= rows <= 8  # ... as one row per turn (1 or 2 turns each)
        assert mini_batch_rows == -(-rows // 2)  # 2 optimizer steps per batch (2 prompts, 1 per mini-batch)
    for step in train:  # metrics count trajectories, not rows
        assert sum(v for k, v in step.items() if k.startswith("generate/stop_reason/")) == 4
    assert sum("eval/all/avg_score" in s for s in steps) == 1


def test_reward_metrics_count_every_turns_reward_once_per_trajectory():
    # Prompt "p": trajectory A is rewarded 1.0 on its first turn and 0 on its last; trajectory B (one turn) gets 0.
    output = GeneratorOutput(
        prompt_token_ids=[[1]] * 3,
        response_ids=[[2, 3], [4], [5]],
        rewards=[[0.0, 1.0], [0.0], [0.0]],
        loss_masks=[[1, 1], [1], [1]],
        stop_reasons=["stop"] * 3,
        is_last_step=[False, True, True],
        env_metrics=[{}, {}, {}],
    )
    rollouts = Rollouts(output, ["p"] * 3, ["e"] * 3, [{}] * 3)
    assert rollouts.trajectory_rewards() == [[0.0, 1.0, 0.0], [0.0]]
    metrics = reward_metrics(rollouts, n_samples_per_prompt=2)
    assert metrics["avg_raw_reward"] == 0.5  # returns 1.0 and 0.0: the earlier turn counts
    assert metrics["pass_at_2"] == 0.0  # the outcome is the last turn's reward, as without step-wise rows
    assert metrics["signal_ratio"] == 1.0
    assert groups_with_signal(rollouts) == {"p": True}
