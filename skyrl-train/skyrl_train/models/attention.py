"""Switching a model's attention implementation for one forward pass (e.g. to one registered with transformers'
`AttentionInterface` that takes extra keyword arguments, such as sample packing's or shared-prefix decoding's)."""

from __future__ import annotations

from contextlib import contextmanager

from torch import nn


@contextmanager
def attention_implementation(model: nn.Module, name: str):
    """Run the block with the model's attention implementation set to `name` (restored afterwards). The model must
    not run elsewhere meanwhile (the setting lives in its shared config)."""
    config = model.config
    previous = config._attn_implementation
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = previous
