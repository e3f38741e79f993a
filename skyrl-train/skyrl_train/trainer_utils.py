"""The trainer's data plumbing: prompts -> generator input, generator output -> training batch."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from skyrl_gym.common.stop_reasons import TrajectoryStopReason
from skyrl_train.algorithms import compute_zero_variance_mask, trajectory_index, trajectory_sums
from skyrl_train.dataset import convert_prompts_responses_to_batch_tensors
from skyrl_train.generators.base import (
    BatchMetadata,
    GeneratorInput,
    GeneratorOutput,
    TrajectoryID,
)
from skyrl_train.generators.utils import get_rollout_metrics, row_hint
from skyrl_train.inference_engines.base import SamplingParams
from skyrl_train.metrics import compute_reward_metrics
from skyrl_train.training_batch import TrainingInputBatch


def prepare_generator_input(
    batch: Mapping[str, Sequence[Any]],
    n_samples_per_prompt: int,
    sampling_params: SamplingParams,
    default_env_class: str,
    training_phase: str,
    global_step: int | None,
) -> tuple[GeneratorInput, list[str]]:
    """Repeat each collated prompt `n_samples_per_prompt` times (consecutively) and return the input and uids.

    Each sample gets its own deep copy of the prompt and extras, since envs may mutate what they receive.
    """
    prompts, env_classes, env_extras, uids, trajectory_ids = [], [], [], [], []
    for prompt, env_class, extras, uid in zip(
        batch["prompt"], batch["env_class"], batch["env_extras"], batch["uid"], strict=True
    ):
        for repetition in range(n_samples_per_prompt):
            prompts.append(copy.deepcopy(prompt))
            env_classes.append(env_class or default_env_class)
            env_extras.append(copy.deepcopy(extras))
            uids.append(uid)
            trajectory_ids.append(TrajectoryID(instance_id=uid, repetition_id=repetition))
    generator_input = GeneratorInput(
        prompts=prompts,
        env_classes=env_classes,
        env_extras=env_extras,
        sampling_params=sampling_params,
        trajectory_ids=trajectory_ids,
        batch_metadata=BatchMetadata(global_step=global_step, training_phase=training_phase),
    )
    return generator_input, uids


@dataclass
class Rollouts:
    """Generated trajectories of some prompts, with the per-row facts the trainer needs beside the output.

    Rows are trajectories, or turns in step-wise mode (`output["is_last_step"]` marks each trajectory's last
    row; a trajectory's rows are contiguous). Row i belongs to prompt `uids[i]` (its GRPO group), ran in env
    `env_classes[i]` with the row's `env_extras[i]` (whose `data_source` is `data_sources[i]`).
    """

    output: GeneratorOutput
    uids: list[str]
    env_classes: list[str]
    env_extras: list[dict[str, Any]]

    @classmethod
    def from_generation(
        cls, generator_input: GeneratorInput, input_uids: list[str], output: GeneratorOutput
    ) -> Rollouts:
        """Align an output with its input: one row per input, or one per turn in step-wise mode."""
        inputs = row_input_indices(output)
        if len(set(inputs)) != len(input_uids):
            raise ValueError(
                f"the generator returned {len(set(inputs))} trajectories for {len(input_uids)} inputs "
                "(a generator must keep one trajectory per input, in input order)"
            )
        extras = generator_input.get("env_extras") or [{} for _ in input_uids]
        return cls(
            output,
            [input_uids[i] for i in inputs],
            [generator_input["env_classes"][i] for i in inputs],
            [extras[i] or {} for i in inputs],
        )

    @property
    def num_rows(self) -> int:
        return len(self.uids)

    @property
    def data_sources(self) -> list[str | None]:
        return [extras.get("data_source") for extras in self.env_extras]

    def trajectory_rows(self) -> list[int]:
        return trajectory_rows(self.output)

    def trajectory_rewards(self) -> list[float | list[float]]:
        """Per trajectory (in `trajectory_rows` order): its rewards, one entry per response token of all its rows in
        order (a row's scalar reward stays a scalar when rows are whole trajectories). So a trajectory's return and
        outcome (`skyrl_train.metrics`) are the same with and without step-wise rows."""
        rewards = self.output["rewards"]
        if self.output.get("is_last_step") is None:
            return list(rewards)
        per_trajectory: list[list[float]] = [[] for _ in self.trajectory_rows()]
        for row, trajectory in enumerate(row_input_indices(self.output)):
            reward = rewards[row]
            per_trajectory[trajectory] += reward if isinstance(reward, list) else [reward]
        return per_trajectory

    def infra_failed(self) -> list[bool]:
        """Per row: did its trajectory end in an infrastructure failure."""
        return infra_failure_mask(self.output.get("stop_reasons"), self.num_rows)

    def rollout_metrics(self) -> dict[str, float]:
        """`get_rollout_metrics` of these rows (lengths, stop reasons, failure counters, env metrics)."""
        output = self.output
        return get_rollout_metrics(
            output["response_ids"],
            output["stop_reasons"],
            self.env_classes,
            output["env_metrics"],
            output.get("is_last_step"),
            output.get("weight_versions"),
        )

    def select(self, rows: Sequence[int], uids: Sequence[str] | None = None) -> Rollouts:
        """The given rows, in that order (optionally under new uids: a copied group needs its own)."""
        output = GeneratorOutput(**{key: _rows_of(value, rows) for key, value in self.output.items()})
        new_uids = [self.uids[i] for i in rows] if uids is None else list(uids)
        return Rollouts(output, new_uids, [self.env_classes[i] for i in rows], [self.env_extras[i] for i in rows])

    @staticmethod
    def concatenate(parts: Sequence[Rollouts]) -> Rollouts:
        """Row-wise concatenation (per-batch rollout metrics are dropped)."""
        return Rollouts(
            concatenate_outputs([part.output for part in parts]),
            [uid for part in parts for uid in part.uids],
            [env_class for part in parts for env_class in part.env_classes],
            [extras for part in parts for extras in part.env_extras],
        )


def _rows_of(value: Any, rows: Sequence[int]) -> Any:
    if value is None or isinstance(value, dict):  # rollout_metrics describe the whole batch: not per row
        return None
    return [value[i] for i in rows]


def concatenate_outputs(outputs: Sequence[GeneratorOutput]) -> GeneratorOutput:
    """Row-wise concatenation of generator outputs (per-batch rollout metrics are dropped)."""
    merged: dict[str, Any] = {}
    for key in outputs[0]:
        if key == "rollout_metrics":
            continue
        values = [out.get(key) for out in outputs]
        merged[key] = None if any(v is None for v in values) else [row for v in values for row in v]
    return GeneratorOutput(**merged)


def row_input_indices(generator_output: GeneratorOutput) -> list[int]:
    """For each output row, the index of the input (trajectory) it belongs to."""
    last = generator_output.get("is_last_step")
    if last is None:
        return list(range(len(generator_output["response_ids"])))
    indices, trajectory = [], 0
    for is_last in last:
        indices.append(trajectory)
        trajectory += bool(is_last)
    return indices


def infra_failure_mask(stop_reasons: Sequence[str] | None, num_rows: int) -> list[bool]:
    """True for rows whose trajectory ended in an infrastructure failure (kept out of baselines and reward metrics)."""
    if stop_reasons is None:
        return [False] * num_rows
    return [reason in TrajectoryStopReason.INFRA_FAILURES for reason in stop_reasons]


def reward_metrics(rollouts: Rollouts, n_samples_per_prompt: int) -> dict[str, float]:
    """`compute_reward_metrics` over the trajectories (in step-wise mode: all their rows' rewards, the final row's
    stop reason and env metrics)."""
    rows = rollouts.trajectory_rows()
    failed = rollouts.infra_failed()
    env_metrics = rollouts.output.get("env_metrics")
    return compute_reward_metrics(
        rollouts.trajectory_rewards(),
        [rollouts.uids[i] for i in rows],
        n_samples_per_prompt,
        [rollouts.data_sources[i] for i in rows],
        [failed[i] for i in rows],
        None if env_metrics is None else [env_metrics[i] for i in rows],
    )


def trajectory_rows(generator_output: GeneratorOutput) -> list[int]:
    """Indices of the rows that stand for whole trajectories: every row, or the last step's in step-wise mode."""
    last = generator_output.get("is_last_step")
    if last is None:
        return list(range(len(generator_output["response_ids"])))
    return [i for i, is_last in enumerate(last) if is_last]


def build_training_batch(
    rollouts: Rollouts, pad_token_id: int, zero_variance_filter: bool = False, zero_variance_kl_rows: int = 0
) -> tuple[TrainingInputBatch, dict[str, float]]:
    """Tensors for the update, plus the batch-level data metrics.

    `baseline_mask` (bool [B]) is False for infrastructure failures: the advantage estimators leave them out
    of group statistics and give them advantage 0, and their loss mask is zero. In step-wise mode `is_last_step`
    (bool [B]) marks each trajectory's last row. With `zero_variance_filter`, groups whose trajectory returns are
    all equal get a zero loss mask as well, except the rows of their first `zero_variance_kl_rows` trajectories,
    which `kl_only` (bool [B], set when that is above 0) marks: they stay in the loss, and the trainer gives them
    advantage 0, for the KL term alone.
    """
    output = rollouts.output
    batch = convert_prompts_responses_to_batch_tensors(
        pad_token_id,
        output["prompt_token_ids"],
        output["response_ids"],
        output["rewards"],
        output["loss_masks"],
        output.get("rollout_logprobs"),
    )
    failed = torch.tensor(rollouts.infra_failed())
    batch["baseline_mask"] = ~failed
    batch["loss_mask"][failed] = 0
    if output.get("is_last_step") is not None:
        batch["is_last_step"] = torch.tensor(output["is_last_step"])
    metrics = {}
    if zero_variance_filter:
        keep = compute_zero_variance_mask(_row_trajectory_returns(batch), rollouts.uids)
        kl_only = _first_trajectories(~keep & ~failed, rollouts.uids, batch.get("is_last_step"), zero_variance_kl_rows)
        batch["loss_mask"][~keep & ~kl_only] = 0
        metrics["trainer/zero_variance_filtered_fraction"] = (~keep).float().mean().item()
        if zero_variance_kl_rows:
            batch["kl_only"] = kl_only
            metrics["trainer/zero_variance_kl_only_fraction"] = kl_only.float().mean().item()
    batch.metadata["uids"] = rollouts.uids
    return batch, metrics


def zero_negative_hinted_advantages(batch: TrainingInputBatch, rollouts: Rollouts) -> dict[str, float]:
    """`trainer.algorithm.hinted_rows_positive_only`: the rows whose question carries a hint (`extra_info.hint`) keep
    only positive advantages; returns the share of rows whose negative advantage was zeroed."""
    hinted = torch.tensor([row_hint(extras) is not None for extras in rollouts.env_extras])
    advantages = batch["advantages"]
    negative = hinted.unsqueeze(-1) & (advantages < 0)
    advantages[negative] = 0.0
    return {"trainer/hinted_negative_advantage_fraction": negative.any(dim=-1).float().mean().item()}


def _first_trajectories(
    rows: torch.Tensor, uids: list[str], is_last_step: torch.Tensor | None, per_group: int
) -> torch.Tensor:
    """bool [B]: of the marked `rows`, those of the first `per_group` trajectories of each group (uid)."""
    trajectory = torch.arange(len(uids)) if is_last_step is None else trajectory_index(is_last_step)
    chosen: dict[str, list[int]] = {}
    picked = torch.zeros_like(rows)
    for row in rows.nonzero().flatten().tolist():
        taken = chosen.setdefault(uids[row], [])
        t = int(trajectory[row])
        if t not in taken and len(taken) < per_group:
            taken.append(t)
        picked[row] = t in taken
    return picked


def _row_trajectory_returns(batch: TrainingInputBatch) -> torch.Tensor:
    """[B]: the return of each row's trajectory (the row's own return unless rows are steps)."""
    returns = batch["rewards"].sum(dim=-1)
    last = batch.get("is_last_step")
    return returns if last is None else trajectory_sums(returns, last)[trajectory_index(last)]
