"""`WeightVersion`: which weights a model computes with, so that nothing derived from them (cached KV) outlives them.

The version lives on the module itself (`WeightVersion.of(model)`): the trainer that changes the weights and the engine
that generates from the same module share it without being wired together. It starts at 0 and goes up on every
change, from the code path that makes the change:

- `optimizer.step()` of an optimizer passed to `track_optimizer` (every `TrainableWorker` tracks its own), through a
  step post-hook, so whoever steps the optimizer bumps the version;
- `model.load_state_dict(...)` (checkpoint loads; peft loads adapters through it too), through a load post-hook
  installed when the version is first attached;
- `bump()` for a change that goes through neither, e.g. disabling or switching a LoRA adapter (`changed()` bumps on
  entering and on leaving such a block) or a weight sync that writes parameters directly.

Readers compare versions: the hf engine keys its prefix KV cache by the version, so no prefix cached under one version
is reused under another, and reports it (`HFInferenceEngine.weight_version`) so rollouts can be stamped with it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

__all__ = ["WeightVersion"]

_ATTRIBUTE = "_skyrl_weight_version"
_attach_lock = threading.Lock()


class WeightVersion:
    """A counter of weight changes of one module; get it with `WeightVersion.of(model)` (see the module docstring)."""

    def __init__(self, value: int = 0):
        self._value = value
        self._lock = threading.Lock()

    @classmethod
    def of(cls, model: nn.Module) -> WeightVersion:
        """The version of `model`'s weights, attached to the module on first use (with its load_state_dict hook)."""
        with _attach_lock:
            version = model.__dict__.get(_ATTRIBUTE)
            if version is None:
                version = cls()
                model.__dict__[_ATTRIBUTE] = version
                model.register_load_state_dict_post_hook(_bump_after_load)
        return version

    @property
    def value(self) -> int:
        return self._value

    def bump(self) -> int:
        """Record a weight change; returns the new version."""
        with self._lock:
            self._value += 1
            return self._value

    @contextmanager
    def changed(self) -> Iterator[None]:
        """Mark a block in which the module computes with other weights (e.g. its LoRA adapter disabled): the
        version changes on entry and again on exit, so nothing computed inside is reused outside, nor the reverse."""
        self.bump()
        try:
            yield
        finally:
            self.bump()

    def track_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Bump after every `optimizer.step()` (a skipped step, which never calls it, changes nothing)."""
        optimizer.register_step_post_hook(lambda _optimizer, _args, _kwargs: self.bump())

    # A lock cannot be copied or pickled: a deep copy of the module (e.g. to merge LoRA for export) gets its own counter.
    def __getstate__(self) -> dict[str, Any]:
        return {"value": self._value}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["value"])


def _bump_after_load(module: nn.Module, _incompatible_keys: Any) -> None:
    # Looks the version up on the module it runs for, so a deep copy of the module bumps its own counter.
    WeightVersion.of(module).bump()
