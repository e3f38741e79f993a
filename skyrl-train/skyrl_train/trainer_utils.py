"""The trainer's data plumbing: prompts -> generator input, generator output -> training batch."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from skyrl_train.algorithms import compute_zero_variance_mask
from skyrl_train.dataset import convert_prompts_responses_to_batch_tensors
from skyrl_train.generators.base import (
    BatchMetadata,
    GeneratorInput,
    GeneratorOutput,
    TrajectoryID,
    TrajectoryStopReason,
)
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


def output_uids(generator_output: GeneratorOutput, input_uids: list[str]) -> list[str]:
    """Row uids of an output: the input's, or (step-wise, several rows per trajectory) from the trajectory ids."""
    trajectory_ids = generator_output.get("trajectory_ids")
    if len(generator_output["response_ids"]) == len(input_uids):
        return input_uids
    if trajectory_ids is None:
        raise ValueError("the generator returned more rows than inputs without trajectory_ids")
    return [tid.instance_id for tid in trajectory_ids]


def infra_failure_mask(stop_reasons: Sequence[str] | None, num_rows: int) -> list[bool]:
    """True for rows whose trajectory ended in an infrastructure failure (kept out of baselines and reward metrics)."""
    if stop_reasons is None:
        return [False] * num_rows
    return [reason in TrajectoryStopReason.INFRA_FAILURES for reason in stop_reasons]


def reward_metrics(
    generator_output: GeneratorOutput, uids: list[str], data_sources: list[str | None], n_samples_per_prompt: int
) -> dict[str, float]:
    """`compute_reward_metrics` over the trajectories (their final rows in step-wise mode)."""
    rows = trajectory_rows(generator_output)
    failed = infra_failure_mask(generator_output.get("stop_reasons"), len(uids))
    env_metrics = generator_output.get("env_metrics")
    return compute_reward_metrics(
        [generator_output["rewards"][i] for i in rows],
        [uids[i] for i in rows],
        n_samples_per_prompt,
        [data_sources[i] for i in rows],
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
    generator_output: GeneratorOutput, uids: list[str], pad_token_id: int, zero_variance_filter: bool = False
) -> tuple[TrainingInputBatch, dict[str, float]]:
    """Tensors for the update, plus the batch-level data metrics.

    `baseline_mask` (bool [B]) is False for infrastructure failures: the advantage estimators leave them out
    of group statistics and give them advantage 0, and their loss mask is zero. With `zero_variance_filter`,
    groups whose (included) rewards are all equal get a zero loss mask as well.
    """
    batch = convert_prompts_responses_to_batch_tensors(
        pad_token_id,
        generator_output["prompt_token_ids"],
        generator_output["response_ids"],
        generator_output["rewards"],
        generator_output["loss_masks"],
        generator_output.get("rollout_logprobs"),
    )
    failed = torch.tensor(infra_failure_mask(generator_output.get("stop_reasons"), len(uids)))
    batch["baseline_mask"] = ~failed
    batch["loss_mask"][failed] = 0
    metrics = {"trainer/infra_failure_fraction": failed.float().mean().item()}
    if zero_variance_filter:
        keep = compute_zero_variance_mask(batch["rewards"].sum(dim=-1), uids)
        batch["loss_mask"][~keep] = 0
        metrics["trainer/zero_variance_filtered_fraction"] = (~keep).float().mean().item()
    batch.metadata["uids"] = uids
    return batch, metrics
