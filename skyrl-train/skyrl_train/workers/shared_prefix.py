"""`SharedPrefix`: tokens every row of a batch starts with (system prompt, demonstrations, the prompt of a GRPO
group), run through the model once; the rows then attend to its keys and values instead of recomputing them.

Gradients flow back through the shared keys and values, so results and gradients are those of running every row in
full, up to float rounding. A prefix can also serve several micro-batches of one mini-batch (``for_micro_batches``):
each micro-batch's backward then stops at the prefix's keys and values and accumulates their gradient, and `backward`
carries the sum through the prefix's own layers once, after the last micro-batch, instead of once per micro-batch.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import DynamicCache

MIN_SHARED_PREFIX = 32
"""Shortest shared prefix (tokens) worth a forward pass of its own."""


def shared_prefix_length(seqs: torch.Tensor, mask: torch.Tensor, end: int) -> int:
    """How many leading real tokens all rows of left-padded `seqs` have in common, counting only tokens before
    column `end` in every row (so that columns from `end` on hold each row's own tokens)."""
    if not bool(mask.any(dim=1).all()):
        return 0
    starts = mask.long().argmax(dim=1)
    span = end - int(starts.max())
    if span <= 0:
        return 0
    tokens = seqs.gather(1, starts[:, None] + torch.arange(span, device=seqs.device)[None, :])
    differs = (tokens != tokens[:1]).any(dim=0)
    return int(differs.long().argmax()) if bool(differs.any()) else span


def recomputes_layers(model: nn.Module) -> bool:
    """Whether ``model``'s forward in its current mode recomputes layers in the backward: activation checkpointing
    is on (a module's ``gradient_checkpointing`` flag, as transformers sets it) and the model is in training mode
    (layers checkpoint only then). Such layers run without a KV cache, so they cannot read a shared prefix."""
    return model.training and any(getattr(module, "gradient_checkpointing", False) for module in model.modules())


def has_active_dropout(model: nn.Module) -> bool:
    """Whether ``model``'s training-mode forward is random: a dropout module with ``p > 0`` (peft's LoRA dropout) or
    a dropout probability > 0 in its config (transformers applies attention dropout without a module)."""
    if any(isinstance(module, nn.Dropout) and module.p > 0 for module in model.modules()):
        return True
    config = getattr(model, "config", None)
    settings = config.to_dict() if config is not None else {}
    return any(
        ("dropout" in key or "pdrop" in key) and type(value) in (int, float) and value > 0
        for key, value in settings.items()
    )


class SharedPrefix:
    """The keys and values of ``tokens`` ``[S]`` under ``model`` (with grad when grad is enabled).

    ``for_micro_batches`` (with grad enabled): the prefix serves several micro-batches that each run their own
    backward. Its keys and values are then leaves that collect the gradient of every use, and `backward` carries
    the sum through the prefix's layers once, after the last micro-batch. Unless the model draws dropout masks, the
    prefix's forward first runs without grad and is recomputed in `backward`, so its activations are not held while
    the micro-batches run (one extra forward of the prefix instead of one forward and backward per micro-batch).
    """

    def __init__(self, model: nn.Module, tokens: torch.Tensor, for_micro_batches: bool = False):
        self.length = int(tokens.numel())
        self._model, self._tokens = model, tokens
        self._deferred = for_micro_batches and torch.is_grad_enabled()
        self._recompute = self._deferred and not (model.training and has_active_dropout(model))
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self._recompute):
            kv = self._forward()
        self._computed = kv if self._deferred and not self._recompute else None
        """Deferred without recomputation: the keys and values as computed, attached to the prefix's graph."""
        if self._deferred:
            kv = [(k.detach().requires_grad_(), v.detach().requires_grad_()) for k, v in kv]
        self._kv = kv

    def _forward(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        past = self._model(input_ids=self._tokens[None, :], use_cache=True, logits_to_keep=1).past_key_values
        return [(layer.keys, layer.values) for layer in past.layers]

    @classmethod
    def of_rows(
        cls, model: nn.Module, seqs: torch.Tensor, mask: torch.Tensor, keep: int, for_micro_batches: bool = False
    ) -> SharedPrefix | None:
        """The prefix all rows of left-padded ``seqs`` share before their last ``keep`` columns, or None when it is
        shorter than `MIN_SHARED_PREFIX`, there is one row, or the model recomputes layers (`recomputes_layers`:
        activation checkpointing cannot carry a cache)."""
        if seqs.shape[0] < 2 or recomputes_layers(model):
            return None
        shared = shared_prefix_length(seqs, mask, seqs.shape[1] - keep)
        if shared < MIN_SHARED_PREFIX:
            return None
        first = int(mask.long().argmax(dim=1)[0])
        return cls(model, seqs[0, first : first + shared], for_micro_batches)

    def backward(self) -> None:
        """After the micro-batches of a ``for_micro_batches`` prefix ran their backward: back-propagate their summed
        gradient through the prefix's layers."""
        if not self._deferred:
            raise RuntimeError("backward() is for a prefix built with for_micro_batches and grad enabled")
        if all(leaf.grad is None for leaf_kv in self._kv for leaf in leaf_kv):
            return  # no micro-batch ran a backward
        computed = self._forward() if self._recompute else self._computed
        pairs = [
            (tensor, leaf.grad)
            for computed_kv, leaf_kv in zip(computed, self._kv, strict=True)
            for tensor, leaf in zip(computed_kv, leaf_kv, strict=True)
            if leaf.grad is not None and tensor.requires_grad
        ]
        if pairs:
            torch.autograd.backward([tensor for tensor, _ in pairs], [grad for _, grad in pairs])

    def cache(self, rows: int) -> DynamicCache:
        """A fresh cache holding the prefix for ``rows`` rows (broadcast views, no copy)."""
        cache = DynamicCache(config=self._model.config)
        for layer, (keys, values) in enumerate(self._kv):
            cache.update(keys.expand(rows, -1, -1, -1), values.expand(rows, -1, -1, -1), layer)
        return cache
