"""`SharedPrefix`: tokens every row of a batch starts with (system prompt, demonstrations, the prompt of a GRPO
group), run through the model once; the rows then attend to its keys and values instead of recomputing them.

Gradients flow back through the shared keys and values, so results and gradients are those of running every row in
full, up to float rounding. A prefix can also serve several micro-batches of one mini-batch (`detached`): each
micro-batch's backward then stops at the prefix's keys and values and accumulates their gradient, and `backward`
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


class SharedPrefix:
    """The keys and values of ``tokens`` ``[S]`` under ``model`` (with grad when grad is enabled)."""

    def __init__(self, model: nn.Module, tokens: torch.Tensor):
        self.length = int(tokens.numel())
        self._config = model.config
        past = model(input_ids=tokens[None, :], use_cache=True, logits_to_keep=1).past_key_values
        self._kv = [(layer.keys, layer.values) for layer in past.layers]
        self._computed: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        """With `detached`: the keys and values as computed, attached to the prefix's forward graph."""

    @classmethod
    def of_rows(cls, model: nn.Module, seqs: torch.Tensor, mask: torch.Tensor, keep: int) -> SharedPrefix | None:
        """The prefix all rows of left-padded ``seqs`` share before their last ``keep`` columns, or None when it is
        shorter than `MIN_SHARED_PREFIX`, there is one row, or the model recomputes layers (activation
        checkpointing cannot carry a cache)."""
        if seqs.shape[0] < 2 or getattr(model, "is_activation_checkpointing", False):
            return None
        shared = shared_prefix_length(seqs, mask, seqs.shape[1] - keep)
        if shared < MIN_SHARED_PREFIX:
            return None
        first = int(mask.long().argmax(dim=1)[0])
        return cls(model, seqs[0, first : first + shared])

    def detached(self) -> SharedPrefix:
        """Make the keys and values leaves that collect the gradient of every use; `backward` passes it on."""
        self._computed = self._kv
        self._kv = [
            (k.detach().requires_grad_(k.requires_grad), v.detach().requires_grad_(v.requires_grad))
            for k, v in self._kv
        ]
        return self

    def backward(self) -> None:
        """After a `detached` prefix's uses ran their backward: back-propagate their summed gradient through the
        prefix's forward pass."""
        if self._computed is None:
            raise RuntimeError("backward() is for a detached() prefix")
        pairs = [
            (computed, leaf.grad)
            for computed_kv, leaf_kv in zip(self._computed, self._kv, strict=True)
            for computed, leaf in zip(computed_kv, leaf_kv, strict=True)
            if leaf.grad is not None
        ]
        if pairs:
            torch.autograd.backward([computed for computed, _ in pairs], [grad for _, grad in pairs])

    def cache(self, rows: int) -> DynamicCache:
        """A fresh cache holding the prefix for ``rows`` rows (broadcast views, no copy)."""
        cache = DynamicCache(config=self._config)
        for layer, (keys, values) in enumerate(self._kv):
            cache.update(keys.expand(rows, -1, -1, -1), values.expand(rows, -1, -1, -1), layer)
        return cache
