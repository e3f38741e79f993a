"""Sort one step's metric values into what each backend can store.

Decisions, the same for every backend:

- Numbers (``int``, ``float``, ``bool``, numpy scalars, one-element tensors/arrays) are scalars. ``bool`` becomes
  ``int``; ints stay ints so counters read as counters in JSONL.
- NaN and +/-inf stay in the scalars: TensorBoard and W&B store them as such, and a NaN loss must be visible.
  JSONL is strict JSON (no ``NaN`` token), so the JSONL backend writes them as ``null``.
- Strings are texts: kept in JSONL, dropped by the numeric backends (TensorBoard, W&B) and the console line.
- Anything else (lists, dicts, None, multi-element tensors) is dropped everywhere; `Tracking` warns once per key.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class StepMetrics:
    """One `Tracking.log` call, sorted: ``scalars`` for every backend, ``texts`` for JSONL only."""

    scalars: dict[str, int | float] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)


def _as_scalar(value: Any) -> int | float | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    # torch tensors and numpy arrays holding exactly one element.
    numel = getattr(value, "numel", None) or getattr(value, "size", None)
    size = numel() if callable(numel) else numel
    if size == 1 and hasattr(value, "item"):
        return _as_scalar(value.item())
    return None


def sort_metrics(metrics: Mapping[str, Any]) -> StepMetrics:
    """Split ``metrics`` into scalars, texts and dropped keys (see the module docstring)."""
    out = StepMetrics()
    for key, value in metrics.items():
        if isinstance(value, str):
            out.texts[key] = value
            continue
        scalar = _as_scalar(value)
        if scalar is None:
            out.dropped.append(key)
        else:
            out.scalars[key] = scalar
    return out
