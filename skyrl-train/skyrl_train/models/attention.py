"""Switching a model's attention implementation for one forward pass (e.g. to one registered with transformers'
`AttentionInterface` that takes extra keyword arguments, such as sample packing's or shared-prefix decoding's).

Activation checkpointing recomputes each layer's forward during the backward, after the block has restored the
previous implementation. A recompute under another implementation computes other values (reentrant checkpointing:
silently wrong gradients) or saves other tensors (non-reentrant: ``CheckpointError``), so `attention_implementation`
makes the model's checkpointed layers recompute under the implementation their forward ran with."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from torch import nn

_KEEPS_ATTENTION = "_skyrl_keeps_attention"
"""Marks a checkpoint function wrapped by `_recompute_under_forward_attention`."""


@contextmanager
def attention_implementation(model: nn.Module, name: str) -> Iterator[None]:
    """Run the block with the model's attention implementation set to `name` (restored afterwards); layers that
    activation checkpointing recomputes in a later backward recompute under `name` too. The model must not run
    elsewhere meanwhile (the setting lives in its shared config)."""
    _recompute_under_forward_attention(model)
    with _implementation(model.config, name):
        yield


@contextmanager
def _implementation(config: Any, name: str) -> Iterator[None]:
    previous = config._attn_implementation
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = previous


def _recompute_under_forward_attention(model: nn.Module) -> None:
    """Wrap the checkpoint function transformers gives each checkpointing module (``_gradient_checkpointing_func``,
    set by ``activation_checkpointing_enable``) so that the checkpointed forward and its recompute both run under
    the implementation set when the forward ran. Idempotent; a no-op for a model that never enabled checkpointing."""
    for module in model.modules():
        checkpoint = getattr(module, "_gradient_checkpointing_func", None)
        if checkpoint is not None and not getattr(checkpoint, _KEEPS_ATTENTION, False):
            module._gradient_checkpointing_func = _keeping_attention(model.config, checkpoint)


def _keeping_attention(config: Any, checkpoint: Callable[..., Any]) -> Callable[..., Any]:
    def checkpoint_under_forward_attention(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        name = config._attn_implementation

        def run(*inputs: Any) -> Any:
            with _implementation(config, name):
                return function(*inputs)

        return checkpoint(run, *args, **kwargs)

    setattr(checkpoint_under_forward_attention, _KEEPS_ATTENTION, True)
    return checkpoint_under_forward_attention
