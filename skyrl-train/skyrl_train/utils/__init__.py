"""Utilities for skyrl_train, at the bottom of its layers with `skyrl_train.types` (see ``tests/test_layers.py``).

``ppo_utils`` keeps upstream SkyRL's module path for the algorithms: it re-exports them, and so sits in their layer.
``initialize_ray`` and ``validate_cfg`` keep upstream's ``from skyrl_train.utils import ...`` working: they belong to the
entrypoints (``skyrl_train.entrypoints.ray_task``, ``skyrl_train.entrypoints.main_base``) and load from there by name
on first use, so this package imports nothing above it.
"""

_UPSTREAM_NAMES = {
    "initialize_ray": "skyrl_train.entrypoints.ray_task",
    "validate_cfg": "skyrl_train.entrypoints.main_base",
}


def __getattr__(name: str):
    if name in _UPSTREAM_NAMES:
        import importlib

        return getattr(importlib.import_module(_UPSTREAM_NAMES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["initialize_ray", "validate_cfg"]
