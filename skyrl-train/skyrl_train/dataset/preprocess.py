"""Turn generator output (token id lists) into the padded tensors of a ``TrainingInputBatch``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from skyrl_train.training_batch import TrainingInputBatch


def convert_prompts_responses_to_batch_tensors(
    tokenizer_or_pad_token_id: Any,
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    rewards: Sequence[float | Sequence[float]],
    loss_masks: Sequence[Sequence[int]],
    logprobs: Sequence[Sequence[float]] | None = None,
) -> TrainingInputBatch:
    """Pad B samples into one batch. With P = longest prompt and R = longest response:

    - ``sequences`` [B, P + R] long: each prompt LEFT-padded to P, then its response RIGHT-padded to R, so every
      response starts at column P; ``attention_mask`` [B, P + R] long: 1 on real tokens.
    - ``response_mask`` [B, R] long: 1 on real response tokens.
    - ``rewards`` [B, R] float32: a scalar reward sits on the last response token, a per-token list is used as is.
    - ``loss_mask`` [B, R] float32 and ``rollout_logprobs`` [B, R] float32 (None if ``logprobs`` is None),
      zero on padding.

    Metadata: ``response_length`` = R. The pad id is ``tokenizer.pad_token_id`` or the int given. Raises
    ``ValueError`` naming the sample and field when per-sample lengths disagree, and for a nonzero scalar reward on
    an empty response (there is no token to carry it; a zero one has nothing to carry).
    """
    pad_id = _pad_id(tokenizer_or_pad_token_id)
    batch = len(prompts)
    named = {"responses": responses, "rewards": rewards, "loss_masks": loss_masks}
    if logprobs is not None:
        named["logprobs"] = logprobs
    for name, values in named.items():
        if len(values) != batch:
            raise ValueError(f"{name} has {len(values)} samples, prompts has {batch}")
    prompt_len = max((len(p) for p in prompts), default=0)
    response_len = max((len(r) for r in responses), default=0)

    sequences = torch.full((batch, prompt_len + response_len), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((batch, prompt_len + response_len), dtype=torch.long)
    response_mask = torch.zeros((batch, response_len), dtype=torch.long)
    reward_tensor = torch.zeros((batch, response_len), dtype=torch.float32)
    loss_mask = torch.zeros((batch, response_len), dtype=torch.float32)
    rollout_logprobs = None if logprobs is None else torch.zeros((batch, response_len), dtype=torch.float32)

    for i, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
        n = len(response)
        sequences[i, prompt_len - len(prompt) : prompt_len] = torch.as_tensor(prompt, dtype=torch.long)
        sequences[i, prompt_len : prompt_len + n] = torch.as_tensor(response, dtype=torch.long)
        attention_mask[i, prompt_len - len(prompt) : prompt_len + n] = 1
        response_mask[i, :n] = 1
        reward_tensor[i, :n] = _reward_row(i, rewards[i], n)
        loss_mask[i, :n] = torch.as_tensor(_same_length(i, "loss_masks", loss_masks[i], n), dtype=torch.float32)
        if rollout_logprobs is not None:
            rollout_logprobs[i, :n] = torch.as_tensor(_same_length(i, "logprobs", logprobs[i], n), dtype=torch.float32)

    return TrainingInputBatch(
        {
            "sequences": sequences,
            "attention_mask": attention_mask,
            "response_mask": response_mask,
            "rewards": reward_tensor,
            "loss_mask": loss_mask,
            "rollout_logprobs": rollout_logprobs,
        },
        metadata={"response_length": response_len},
    )


def _pad_id(tokenizer_or_pad_token_id: Any) -> int:
    if isinstance(tokenizer_or_pad_token_id, int):
        return tokenizer_or_pad_token_id
    pad_id = getattr(tokenizer_or_pad_token_id, "pad_token_id", None)
    if pad_id is None:
        raise ValueError("the tokenizer has no pad_token_id; set one (load_tokenizer does) or pass the pad id")
    return pad_id


def _same_length(index: int, field: str, values: Any, response_len: int) -> Sequence[Any]:
    if values is None or len(values) != response_len:
        got = "None" if values is None else f"{len(values)} entries"
        raise ValueError(f"sample {index}: {field} has {got}, but its response has {response_len} tokens")
    return values


def _reward_row(index: int, reward: float | Sequence[float], response_len: int) -> torch.Tensor:
    if isinstance(reward, int | float):
        if response_len == 0 and reward != 0:
            raise ValueError(f"sample {index}: rewards is a scalar but the response is empty (no token to carry it)")
        row = torch.zeros(response_len, dtype=torch.float32)
        if response_len:
            row[-1] = float(reward)
        return row
    return torch.as_tensor(_same_length(index, "rewards", reward, response_len), dtype=torch.float32)
