"""Forward passes over training batches: per-token response logprobs (and entropy) of a causal LM.

A batch row is ``sequences = [left-padded prompt | right-padded response]`` of shape ``[B, P + R]`` with its
``attention_mask``. The logprob of response token ``t`` (column ``P + t``) comes from the logits at column
``P + t − 1``, so the last ``R + 1`` logit columns are all that is needed.

Rules that keep trainer logprobs equal to the inference engine's (< 1e-3 in fp32):

- position ids come from the attention mask (``cumsum − 1``), because prompts are left-padded: a padded row
  then sees exactly the positions it would see alone;
- logits are divided by the sampling temperature (0 counts as 1, as greedy decoding reports plain logprobs).

Work is kept to what the response needs: padding columns shared by every row of a micro-batch are cut off
(leading prompt padding, trailing response padding), the LM head runs only before the response tokens whose logprob is
needed (the loss mask's: in a multi-turn episode most response tokens are tool results, which no loss reads; a model
whose logits `lm_head` cannot compute, unpacked, gets them for the last ``R + 1`` positions) and the logprob is
``logit[token] − logsumexp(logits)``. For models whose logits are plain ``lm_head(hidden)`` the head runs a chunk of
rows at a time from the final hidden states (`lm_head`), so no ``[tokens, vocab]`` tensor is held for the backward.
Outputs are zero wherever the response is padding or outside the loss mask, so they do not depend on how a batch was
split into micro-batches.

Shared prompt prefixes are computed once: when every row of a micro-batch starts with the same tokens (a system
prompt, few-shot demonstrations, the n samples of one GRPO prompt), those tokens go through the model once and
their keys/values are broadcast to the rows, which then only run their own tokens. Gradients flow back through the
broadcast, so logprobs and gradients are those of the plain forward (up to float rounding) at a fraction of the
compute and activation memory. Not in a training-mode forward with activation checkpointing, which recomputes
layers and cannot carry a cache (the eval-mode logprob passes still share).

``uniform=True`` is for a model sharded with FSDP2, whose every forward is a collective of all ranks: each rank must
run the same forwards whatever its rows, so no prefix is shared (whether rows share one depends on the rank's rows)
and a micro-batch without response tokens still runs one forward (its outputs stay zero).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from skyrl_train.algorithms import compute_entropy
from skyrl_train.training_batch import TrainingInputBatch
from skyrl_train.workers.lm_head import chunkable_head, head_logprobs, head_outputs
from skyrl_train.workers.packing import packed_outputs
from skyrl_train.workers.shared_prefix import SharedPrefix, has_active_dropout, shared_prefix_length

__all__ = [
    "effective_temperature",
    "has_active_dropout",
    "eval_mode",
    "position_ids_from_attention_mask",
    "response_logprobs",
    "batched_response_logprobs",
    "batch_prefix",
    "trim_padding",
    "pad_response",
    "shared_prefix_length",
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
    share_prefix: bool = True,
    pack: bool = False,
    prefix: SharedPrefix | None = None,
    uniform: bool = False,
    with_top1: bool = False,
    token_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None] | tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """Logprobs ``[B, R]`` of the last ``R = response_length`` tokens of ``sequences`` under ``model``.

    Differentiable when grad is enabled. With ``with_entropy``, also the entropy ``[B, R]`` of each of those
    next-token distributions (at the same temperature); ``entropy_grad=False`` computes it without building
    a graph through the vocabulary softmax (for a metric only). Both are 0 on response padding.
    ``share_prefix=False`` runs every row through the whole model even when the rows share a prompt prefix.
    ``pack=True`` runs the rows as one packed row without padding (`skyrl_train.workers.packing`); each row's real
    tokens must then be contiguous. ``prefix``: a prefix every row starts with, already computed (e.g. once for all
    micro-batches of a mini-batch); it must end before each row's last prompt token. ``uniform``: the same forwards
    whatever the rows (FSDP2 ranks; see the module docstring). ``with_top1``: a third value ``[B, R]``, 1.0 where the
    token is a most likely one of its distribution (token accuracy; no gradient), 0 on padding.
    ``token_mask`` ``[B, R]``: the response tokens whose values are needed (the loss mask); the LM head runs only there
    and every output is 0 elsewhere, as on padding (in a multi-turn episode most response tokens are tool results).
    """
    seqs, mask, kept = trim_padding(sequences, attention_mask, response_length)
    batch_size = sequences.shape[0]
    if kept == 0:
        zeros = sequences.new_zeros((batch_size, response_length), dtype=torch.float32)
        if uniform:  # the other ranks' forward waits for this one; 0 x its output keeps a graph for their backward
            ones = torch.ones_like(sequences)
            zeros = zeros + 0.0 * head_outputs(model, 1, hidden=False, input_ids=sequences, attention_mask=ones).sum()
        empty = (zeros, (zeros.clone() if with_entropy else None))
        return (*empty, zeros.detach().clone()) if with_top1 else empty
    if prefix is None and share_prefix and not uniform:
        prefix = SharedPrefix.of_rows(model, seqs, mask, kept + 1)
    head = chunkable_head(model)
    wanted = mask[:, -kept:].bool()
    if token_mask is not None:
        wanted = wanted & token_mask[:, :kept].to(wanted.device).bool()
    rows, columns = wanted.nonzero(as_tuple=True)
    if pack:
        outputs = packed_outputs(model, seqs, mask, kept, rows, columns, prefix, hidden=head is not None)
    else:
        outputs = _last_logits(model, seqs, mask, kept + 1, prefix, hidden=head is not None)[:, :-1, :][rows, columns]
    targets = seqs[:, -kept:][rows, columns]
    temp = effective_temperature(temperature)
    entropy_grad = entropy_grad and torch.is_grad_enabled()
    if head is not None:
        logprobs, entropy, top1 = head_logprobs(
            outputs, head.weight, targets, temp, with_entropy=with_entropy, entropy_grad=entropy_grad, with_top1=True
        )
    else:
        logprobs, entropy, top1 = _logits_logprobs(outputs, targets, temp, with_entropy, entropy_grad)
    # From the wanted tokens back to the [B, kept] grid, 0 elsewhere.
    grid = logprobs.new_zeros((batch_size, kept))
    logprobs = grid.index_put((rows, columns), logprobs)
    entropy = None if entropy is None else grid.index_put((rows, columns), entropy)
    top1 = grid.detach().index_put((rows, columns), top1.detach())
    out = (pad_response(logprobs, response_length), None if entropy is None else pad_response(entropy, response_length))
    return (*out, pad_response(top1, response_length)) if with_top1 else out


def _logits_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, temp: float, with_entropy: bool, entropy_grad: bool
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """Logprobs at ``targets``, entropy (or None) and top-1 indicators (as `head_logprobs`) from the model's own logits
    ``[..., V]``, for models `head_logprobs` cannot serve."""
    if logits.dtype != torch.float32:
        logits = logits.float()
    if temp != 1.0:
        logits = logits / temp if logits.requires_grad else logits.div_(temp)
    target_logits = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    logprobs = target_logits - torch.logsumexp(logits, dim=-1)
    top1 = (target_logits >= logits.amax(dim=-1)).float().detach()
    if not with_entropy:
        return logprobs, None, top1
    with torch.set_grad_enabled(entropy_grad):
        return logprobs, compute_entropy(logits), top1


def _last_logits(
    model: nn.Module, seqs: torch.Tensor, mask: torch.Tensor, keep: int, prefix: SharedPrefix | None, hidden: bool
) -> torch.Tensor:
    """Logits of the last `keep` columns of left-padded `seqs` (with ``hidden``, the final hidden states behind them),
    reading the tokens of `prefix` (which every row starts with) from its cache instead of computing them."""
    if prefix is None:
        return head_outputs(
            model,
            keep,
            hidden=hidden,
            input_ids=seqs,
            attention_mask=mask,
            position_ids=position_ids_from_attention_mask(mask),
            use_cache=False,
        )
    rows, shared = seqs.shape[0], prefix.length
    starts = mask.long().argmax(dim=1)
    # Row i's prefix ends at column starts[i] + shared; its own tokens follow. Cut every row at the earliest such
    # end and hide the prefix tokens of rows whose prefix ends later (they are in the cache already).
    cut = int(starts.min()) + shared
    own = mask[:, cut:] * (torch.arange(cut, seqs.shape[1], device=seqs.device)[None, :] >= (starts + shared)[:, None])
    positions = (own.long().cumsum(dim=-1) - 1).clamp_min_(0) + shared
    return head_outputs(
        model,
        keep,
        hidden=hidden,
        input_ids=seqs[:, cut:],
        attention_mask=torch.cat([own.new_ones(rows, shared), own], dim=1),
        position_ids=positions,
        past_key_values=prefix.cache(rows),
        use_cache=True,
    )


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """Run with ``model.eval()`` (no dropout) and restore the previous train/eval mode afterwards."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def batch_prefix(model: nn.Module, batch: TrainingInputBatch, for_micro_batches: bool = False) -> SharedPrefix | None:
    """The prefix every row of ``batch`` shares before its last prompt token (`SharedPrefix.of_rows`), computed now;
    None when there is none worth sharing."""
    seqs, mask, kept = trim_padding(batch["sequences"], batch["attention_mask"], batch["response_mask"].shape[1])
    return SharedPrefix.of_rows(model, seqs, mask, kept + 1, for_micro_batches) if kept else None


@torch.no_grad()
def batched_response_logprobs(
    model: nn.Module,
    batch: TrainingInputBatch,
    micro_batch_size: int,
    temperature: float,
    pack: bool = False,
    uniform: bool = False,
) -> torch.Tensor:
    """``response_logprobs`` over a whole batch in micro-batches (each packed with ``pack``, and then a prefix all rows
    share computed once for all micro-batches), in eval mode, without grad; ``uniform`` as there.

    The response length ``R`` is the width of ``batch["response_mask"]``. Returns ``[B, R]`` float32 on the
    batch's device, 0 where ``batch["loss_mask"]`` (when the batch has one) is 0: what no loss reads is not computed.
    """
    response_length = batch["response_mask"].shape[1]
    with eval_mode(model):
        prefix = batch_prefix(model, batch) if pack else None
        chunks = [
            response_logprobs(
                model,
                micro["sequences"],
                micro["attention_mask"],
                response_length,
                temperature,
                pack=pack,
                prefix=prefix,
                uniform=uniform,
                token_mask=micro.get("loss_mask"),
            )[0]
            for micro in batch.chunk(micro_batch_size)
        ]
    return torch.cat(chunks)
