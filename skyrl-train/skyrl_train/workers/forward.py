"""Forward passes over training batches: per-token response logprobs (and entropy) of a causal LM.

A batch row is ``sequences = [left-padded prompt | right-padded response]`` of shape ``[B, P + R]`` with its
``attention_mask``. The logprob of response token ``t`` (column ``P + t``) comes from the logits at column
``P + t − 1``, so the last ``R + 1`` logit columns are all that is needed.

Rules that keep trainer logprobs equal to the inference engine's (< 1e-3 in fp32):

- position ids come from the attention mask (``cumsum − 1``), because prompts are left-padded: a padded row
  then sees exactly the positions it would see alone;
- logits are divided by the sampling temperature (0 counts as 1, as greedy decoding reports plain logprobs).

Work is kept to what the response needs: padding columns shared by every row of a micro-batch are cut off
(leading prompt padding, trailing response padding), the LM head runs on the last ``R + 1`` positions only
(``logits_to_keep``) and the logprob is ``logit[token] − logsumexp(logits)``, which never materialises a
second vocabulary-sized tensor. Outputs are zero wherever the response is padding, so they do not depend on
how a batch was split into micro-batches.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from skyrl_train.algorithms import compute_entropy
from skyrl_train.training_batch import TrainingInputBatch

__all__ = [
    "effective_temperature",
    "eval_mode",
    "position_ids_from_attention_mask",
    "response_logprobs",
    "batched_response_logprobs",
    "trim_padding",
    "pad_response",
]


def effective_temperature(temperature: float) -> float:
    """The divisor of the logits: the sampling temperature, with 0 (greedy) counted as 1."""
    return 1.0 if temperature == 0 else float(temperature)


def position_ids_from_attention_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """``cumsum(mask) − 1`` per row, so the first real token is position 0 whatever the left padding.

    Padding columns get position 0 (they are masked out of attention; the value only has to be valid).
    """
    positions = attention_mask.long().cumsum(dim=-1) - 1
    return positions.clamp_min_(0)


def trim_padding(
    sequences: torch.Tensor, attention_mask: torch.Tensor, response_length: int
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Drop leading columns that are padding in every row and trailing ones likewise.

    Returns ``(sequences, attention_mask, kept_response_length)``; the dropped trailing columns all belong
    to the response (``kept ≤ response_length``), and re-padding the outputs with ``pad_response`` restores
    the ``[B, response_length]`` shape.
    """
    used = attention_mask.bool().any(dim=0).nonzero()
    total = attention_mask.shape[1]
    if used.numel() == 0:
        return sequences[:, :0], attention_mask[:, :0], 0
    first, last = int(used[0]), int(used[-1]) + 1
    kept_response = max(0, min(response_length, response_length - (total - last)))
    first = min(first, last - kept_response - 1) if kept_response else first
    return sequences[:, first:last], attention_mask[:, first:last], kept_response


def pad_response(values: torch.Tensor, response_length: int) -> torch.Tensor:
    """Right-pad ``[B, r]`` with zeros to ``[B, response_length]``."""
    missing = response_length - values.shape[1]
    return values if missing == 0 else torch.nn.functional.pad(values, (0, missing))


def response_logprobs(
    model: nn.Module,
    sequences: torch.Tensor,
    attention_mask: torch.Tensor,
    response_length: int,
    temperature: float = 1.0,
    *,
    with_entropy: bool = False,
    entropy_grad: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Logprobs ``[B, R]`` of the last ``R = response_length`` tokens of ``sequences`` under ``model``.

    Differentiable when grad is enabled. With ``with_entropy``, also the entropy ``[B, R]`` of each of those
    next-token distributions (at the same temperature); ``entropy_grad=False`` computes it without building
    a graph through the vocabulary softmax (for a metric only). Both are 0 on response padding.
    """
    seqs, mask, kept = trim_padding(sequences, attention_mask, response_length)
    batch_size = sequences.shape[0]
    if kept == 0:
        zeros = sequences.new_zeros((batch_size, response_length), dtype=torch.float32)
        return zeros, (zeros.clone() if with_entropy else None)
    output = model(
        input_ids=seqs,
        attention_mask=mask,
        position_ids=position_ids_from_attention_mask(mask),
        use_cache=False,
        logits_to_keep=kept + 1,
    )
    logits = output.logits[:, :-1, :]
    if logits.dtype != torch.float32:
        logits = logits.float()
    temp = effective_temperature(temperature)
    if temp != 1.0:
        logits = logits / temp if logits.requires_grad else logits.div_(temp)
    targets = seqs[:, -kept:]
    response_mask = mask[:, -kept:].to(logits.dtype)
    token_logits = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    logprobs = (token_logits - torch.logsumexp(logits, dim=-1)) * response_mask
    entropy = None
    if with_entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            entropy = pad_response(compute_entropy(logits, response_mask), response_length)
    return pad_response(logprobs, response_length), entropy


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """Run with ``model.eval()`` (no dropout) and restore the previous train/eval mode afterwards."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


@torch.no_grad()
def batched_response_logprobs(
    model: nn.Module, batch: TrainingInputBatch, micro_batch_size: int, temperature: float
) -> torch.Tensor:
    """``response_logprobs`` over a whole batch in micro-batches, in eval mode, without grad.

    The response length ``R`` is the width of ``batch["response_mask"]``. Returns ``[B, R]`` float32 on the
    batch's device.
    """
    response_length = batch["response_mask"].shape[1]
    with eval_mode(model):
        chunks = [
            response_logprobs(model, micro["sequences"], micro["attention_mask"], response_length, temperature)[0]
            for micro in batch.chunk(micro_batch_size)
        ]
    return torch.cat(chunks)
