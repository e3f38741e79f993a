"""Helpers for environment authors."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def required_extra(extras: Mapping[str, Any] | None, *keys: str) -> Any:
    """`extras[k1][k2]...`, raising a KeyError that names the full key path when any level is missing."""
    value: Any = extras or {}
    for depth, key in enumerate(keys):
        if not isinstance(value, Mapping) or value.get(key) is None:
            path = "".join(f"[{k!r}]" for k in keys)
            missing = "".join(f"[{k!r}]" for k in keys[: depth + 1])
            raise KeyError(
                f"extras{path} is required (extras{missing} is missing); got extras keys {sorted(extras or {})}"
            )
        value = value[key]
    return value
