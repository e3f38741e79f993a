"""Decode attention that reads a prefix shared by every row once per step instead of once per row.

In an agent's rollouts every sequence of the running batch starts with the same system prompt, tool list and
demonstrations (hundreds of tokens), and on CPU a decode step is bound by the bytes it reads: with each row holding
its own copy of that prefix's keys and values, attention reads them rows times per layer. Here the prefix's KV is
stored once (`SharedPrefixKV`) and each row stores only its own columns after it; a query's attention over the
concatenation [prefix, own columns] is computed as one softmax over both score blocks, the prefix block for all rows
in one batched matmul (the same maths as attention over a row holding the whole sequence, up to float rounding).
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn
from transformers import AttentionInterface

SHARED_PREFIX_ATTENTION = "skyrl_shared_prefix_decode"
"""Name of `shared_prefix_decode_attention` among transformers' attention implementations."""


@dataclasses.dataclass(frozen=True)
class SharedPrefixKV:
    """What a decode step's attention reads besides each row's own KV (which the cache passes as key / value)."""

    keys: list[torch.Tensor]
    """Per layer [kv_heads, prefix_length, head_dim]: the prefix every row starts with."""
    values: list[torch.Tensor]
    own_bias: torch.Tensor
    """[rows, 1, 1, own_columns] additive: 0 on a row's real columns, -inf on its left padding."""


def shared_prefix_decode_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    *,
    shared_prefix: SharedPrefixKV,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """One decode token per row: query ``[R, H, 1, D]``; key / value ``[R, Hkv, W, D]``, the rows' own columns (the
    fed token last). Each row attends to ``shared_prefix`` (layer ``module.layer_idx``) and then to its own real
    columns. Returns ``[R, 1, H, D]`` as transformers' attention functions do. Inference only (no dropout)."""
    rows, heads, length, dim = query.shape
    if length != 1:
        raise ValueError(f"shared-prefix attention decodes one token per row, got {length}")
    kv_heads = key.shape[1]
    group = heads // kv_heads
    scale = dim**-0.5 if scaling is None else scaling
    prefix_keys = shared_prefix.keys[module.layer_idx]
    prefix_values = shared_prefix.values[module.layer_idx]
    prefix_length = prefix_keys.shape[1]

    grouped = query.view(rows, kv_heads, group, dim) * scale  # heads j * group .. (j + 1) * group - 1 share kv head j
    by_kv_head = grouped.transpose(0, 1).reshape(kv_heads, rows * group, dim)
    prefix_scores = torch.matmul(by_kv_head, prefix_keys.transpose(1, 2))  # [Hkv, R * G, P], the prefix read once
    prefix_scores = prefix_scores.view(kv_heads, rows, group, prefix_length).transpose(0, 1)
    own_scores = torch.matmul(grouped, key.transpose(2, 3))  # [R, Hkv, G, W]
    scores = torch.cat([prefix_scores, own_scores + shared_prefix.own_bias], dim=-1)
    weights = torch.softmax(scores.float(), dim=-1).to(query.dtype)
    prefix_weights, own_weights = weights.split([prefix_length, key.shape[2]], dim=-1)

    prefix_weights = prefix_weights.transpose(0, 1).reshape(kv_heads, rows * group, prefix_length)
    output = torch.matmul(prefix_weights, prefix_values).view(kv_heads, rows, group, dim).transpose(0, 1)
    output = output + torch.matmul(own_weights, value)  # [R, Hkv, G, D]
    return output.reshape(rows, 1, heads, dim), None


AttentionInterface.register(SHARED_PREFIX_ATTENTION, shared_prefix_decode_attention)
