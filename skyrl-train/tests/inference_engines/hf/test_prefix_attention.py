"""Shared-prefix decode attention equals attention over each row's whole sequence (prefix + own columns), on every
available device."""

from __future__ import annotations

import types

import torch

from skyrl_train.inference_engines.hf.prefix_attention import SharedPrefixKV, shared_prefix_decode_attention
from skyrl_train.testing import on_every_device


@on_every_device
def test_equals_attention_over_the_prefix_followed_by_each_rows_real_columns(device):
    generator = torch.Generator().manual_seed(0)
    rows, heads, kv_heads, dim, prefix, own = 3, 6, 2, 8, 5, 7
    query = torch.randn(rows, heads, 1, dim, generator=generator)
    prefix_keys, prefix_values = torch.randn(2, kv_heads, prefix, dim, generator=generator)
    keys, values = torch.randn(2, rows, kv_heads, own, dim, generator=generator)
    starts = [0, 3, 6]  # row r's real own columns are [starts[r], own); the others are left padding
    real = torch.arange(own)[None, :] >= torch.tensor(starts)[:, None]
    bias = torch.zeros(rows, own).masked_fill(~real, float("-inf"))[:, None, None, :]
    shared = SharedPrefixKV(
        [torch.zeros(1, device=device), prefix_keys.to(device)],
        [torch.zeros(1, device=device), prefix_values.to(device)],
        bias.to(device),
    )

    output, _ = shared_prefix_decode_attention(
        types.SimpleNamespace(layer_idx=1),
        query.to(device),
        keys.to(device),
        values.to(device),
        None,
        scaling=0.3,
        shared_prefix=shared,
    )

    assert output.shape == (rows, 1, heads, dim) and output.device.type == device
    output = output.cpu()
    for row, start in enumerate(starts):
        whole_keys = torch.cat([prefix_keys, keys[row, :, start:]], dim=1).repeat_interleave(heads // kv_heads, 0)
        whole_values = torch.cat([prefix_values, values[row, :, start:]], dim=1).repeat_interleave(heads // kv_heads, 0)
        expected = torch.softmax(query[row] @ whole_keys.transpose(1, 2) * 0.3, dim=-1) @ whole_values  # [H, 1, D]
        torch.testing.assert_close(output[row, 0], expected[:, 0], rtol=1e-5, atol=1e-6)
