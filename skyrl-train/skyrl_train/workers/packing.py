"""Sample packing (``trainer.use_sample_packing``): a micro-batch's rows go through the model as one row without
padding.

A padded micro-batch ``[B, T]`` spends its layers on every padding column (left prompt padding up to the longest
prompt, right response padding up to the longest response). Packed, only real tokens are computed: the rows' tokens
are concatenated into one row ``[1, N]``, each keeps its own position ids (0.. per row, or continuing after a shared
prefix), and attention runs per row (`segment_attention`): each row's tokens attend causally to its own tokens and
to the shared prefix, never to another row. The LM head then runs only where a response token's logprob is needed.
Results equal the padded forward's up to float rounding (the same tokens, positions and attention, other matmul
shapes).

A prefix every row starts with (system prompt, demonstrations) is computed once, as in the padded path, and its keys
and values are shared by every row's attention; in a training-mode forward with activation checkpointing nothing is
shared (recomputed layers cannot carry a cache). Checkpointed layers recompute with this module's attention too
(`skyrl_train.models.attention`), so packing gives the same gradients with and without checkpointing.
"""

from __future__ import annotations

import functools

import torch
from torch import nn
from transformers import AttentionInterface

from skyrl_train.models.attention import attention_implementation
from skyrl_train.workers.lm_head import head_outputs
from skyrl_train.workers.shared_prefix import SharedPrefix

SEGMENT_ATTENTION = "skyrl_segments"
"""Name of `segment_attention` among transformers' attention implementations."""

__all__ = ["PackedRows", "pack_rows", "packed_outputs", "segment_attention"]


def segment_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    *,
    segments: list[tuple[int, int]],
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Attention of a packed row: query ``[1, H, N, D]``; key / value ``[1, Hkv, S + N, D]`` (``S`` shared-prefix
    columns first). Rows are the ``segments`` ``[start, end)`` of the ``N`` packed tokens, consecutive from 0 to
    ``N``; each attends to the prefix and causally to itself. Returns ``[1, N, H, D]`` as transformers' attention
    functions do.

    The rows are cut out with ``split`` rather than one slice each: a slice's backward writes its gradient into a
    zero tensor of the whole input, so slicing out every row costs rows x N in the backward, a split's one
    concatenation costs N."""
    prefix = key.shape[2] - query.shape[2]
    lengths = [end - start for start, end in segments]
    prefix_key, own_keys = key.split([prefix, query.shape[2]], dim=2)
    prefix_value, own_values = value.split([prefix, query.shape[2]], dim=2)
    rows = zip(
        query.split(lengths, dim=2), own_keys.split(lengths, dim=2), own_values.split(lengths, dim=2), strict=True
    )
    outputs = [
        nn.functional.scaled_dot_product_attention(
            row_query,
            torch.cat([prefix_key, row_key], dim=2) if prefix else row_key,
            torch.cat([prefix_value, row_value], dim=2) if prefix else row_value,
            attn_mask=_causal_after_prefix(row_query.shape[2], prefix, query.device),
            dropout_p=dropout,
            scale=scaling,
            enable_gqa=query.shape[1] != key.shape[1],
        )
        for row_query, row_key, row_value in rows
        if row_query.shape[2]
    ]
    return torch.cat(outputs, dim=2).transpose(1, 2).contiguous(), None


@functools.lru_cache(maxsize=64)
def _causal_after_prefix(length: int, prefix: int, device: torch.device) -> torch.Tensor:
    """``[length, prefix + length]`` bool: each of a row's tokens sees the prefix and the row up to itself (the same
    for every layer, so built once)."""
    return torch.ones(length, prefix + length, dtype=torch.bool, device=device).tril_(diagonal=prefix)


AttentionInterface.register(SEGMENT_ATTENTION, segment_attention)


class PackedRows:
    """Where the real tokens of a left-padded micro-batch go in the packed row (see `pack_rows`)."""

    def __init__(self, input_ids: torch.Tensor, position_ids: torch.Tensor, segments: list[tuple[int, int]]):
        self.input_ids = input_ids
        """[1, N] the rows' own tokens (after the shared prefix), row after row."""
        self.position_ids = position_ids
        """[1, N] each token's position in its row (the shared prefix counts)."""
        self.segments = segments
        """Per row, its [start, end) in the packed row (empty for a row without own tokens)."""


def pack_rows(seqs: torch.Tensor, mask: torch.Tensor, shared: int) -> PackedRows:
    """Pack the real tokens of ``seqs`` ``[B, T]`` (each row's real tokens contiguous, as in the trainer's
    left-padded prompt + right-padded response layout) that come after the first ``shared`` real tokens."""
    mask = mask.bool()
    lengths = mask.sum(dim=1)
    starts = mask.long().argmax(dim=1)
    columns = torch.arange(seqs.shape[1], device=seqs.device)
    contiguous = (columns[None, :] >= starts[:, None]) & (columns[None, :] < (starts + lengths)[:, None])
    if not bool((contiguous == mask).all()):
        raise ValueError("sample packing needs each row's real tokens to be contiguous (attention mask 0..0 1..1 0..0)")
    own = contiguous & (columns[None, :] >= (starts + shared)[:, None])
    input_ids = seqs[own][None, :]
    position_ids = (columns[None, :] - starts[:, None])[own][None, :]
    ends = own.sum(dim=1).cumsum(dim=0).tolist()
    segments = list(zip([0, *ends[:-1]], ends, strict=True))
    return PackedRows(input_ids, position_ids, segments)


def packed_outputs(
    model: nn.Module,
    seqs: torch.Tensor,
    mask: torch.Tensor,
    response_length: int,
    rows: torch.Tensor,
    columns: torch.Tensor,
    prefix: SharedPrefix | None,
    hidden: bool,
) -> torch.Tensor:
    """The next-token logits behind response tokens ``(rows[j], columns[j])`` of the ``[B, R]`` response grid (real
    tokens), from one packed forward pass.

    The response is the last ``R = response_length`` columns of ``seqs``. Returns ``[M, V]``: row ``j`` holds the
    logits the padded forward gives just before response token ``(rows[j], columns[j])``. The tokens of ``prefix``,
    which every row starts with, are read from its cache; it must end before each row's last prompt token. With
    ``hidden``, the final hidden states ``[M, H]`` behind those logits instead (`lm_head.head_outputs`)."""
    shared = 0 if prefix is None else prefix.length
    past = None if prefix is None else prefix.cache(1)
    starts = mask.long().argmax(dim=1)
    packed = pack_rows(seqs, mask, shared)
    # Packed index of each padded column's token (-1: padding or shared prefix), to find the logits to keep.
    own = mask.bool() & (torch.arange(seqs.shape[1], device=seqs.device)[None, :] >= (starts + shared)[:, None])
    index = torch.full(seqs.shape, -1, dtype=torch.long, device=seqs.device)
    index[own] = torch.arange(int(own.sum()), device=seqs.device)
    before = index[:, seqs.shape[1] - response_length - 1 : -1][rows, columns]
    if bool((before < 0).any()):
        raise ValueError("a response token follows the shared prefix or padding: nothing to predict it from")
    with attention_implementation(model, SEGMENT_ATTENTION):
        outputs = head_outputs(
            model,
            before,
            hidden=hidden,
            input_ids=packed.input_ids,
            position_ids=packed.position_ids,
            past_key_values=past,
            use_cache=past is not None,
            segments=packed.segments,
        )
    return outputs[0]
