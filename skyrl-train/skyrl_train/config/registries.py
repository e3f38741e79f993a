"""Name -> function registries for advantage estimators and policy losses.

The trainer looks functions up by the names in ``trainer.algorithm.advantage_estimator`` and
``trainer.algorithm.policy_loss_type``. Built-ins are registered under upstream SkyRL's names
(``grpo``, ``rloo``, ``reinforce++``, ``gae``; ``regular``, ``dual_clip``, ``gspo``, ``cross_entropy``). Add your own::

    @AdvantageEstimatorRegistry.register("my_estimator")
    def my_estimator(*, token_level_rewards, response_mask, index, **kwargs):
        ...
        return advantages, returns

    PolicyLossRegistry.register("my_loss", my_loss_fn)   # plain call form

Registering a name twice raises ``ValueError`` (unregister first to replace). Looking up an unknown name
raises ``ValueError`` listing the available names.

Calling conventions (what the trainer passes):

- advantage estimator: keyword arguments only, ``fn(token_level_rewards=[B,T], response_mask=[B,T],
  index=uids, values=[B,T] | None, gamma=float, lambd=float, grpo_norm_by_std=bool,
  baseline_mask=[B] | None, config=AlgorithmConfig)``; returns ``(advantages [B,T], returns [B,T])``. Accept
  ``**kwargs`` and ignore what you do not use. In step-wise mode the estimator sees one row per trajectory.
- policy loss (upstream's signature): ``fn(log_probs, old_log_probs, advantages, config, loss_mask=None,
  rollout_logprobs=None)`` with tensors ``[B,T]`` and ``config`` the ``trainer.algorithm`` section
  (``skyrl_train.config.schema.AlgorithmConfig``); returns ``(per_token_loss [B,T], metrics: dict[str, float])``.
  The reduction to a scalar is done separately by ``reduce_loss`` so it stays correct across micro-batches, and the
  off-policy correction (``trainer.algorithm.off_policy_correction``) is applied by the worker to the per-token loss
  returned, whatever the loss (``skyrl_train.algorithms.off_policy``). A loss written for upstream skyrl-train 0.3
  (a 0-dim loss it reduced itself, the clip ratio as a bare float, no ``rollout_logprobs`` parameter) is called as
  ``skyrl_train.algorithms.loss_calls`` says.

Registrations live in the process that makes them. Upstream's ``initialize_ray(cfg)``
(``skyrl_train.utils.initialize_ray``) copies the driver's custom registrations (``custom_functions``) into every Ray
worker process of the job (``install``), as upstream SkyRL syncs them through a named actor; any other multi-process
launcher must import the module that registers custom functions in every worker.

The registries sit with the config, which checks the two names against them (`validate_cfg`), below the algorithms
that register into them. The built-ins are registered by ``skyrl_train.algorithms``, imported by name on the first
lookup or listing, as skyrl_gym's registry imports an env's ``"module:Class"`` entry point on ``make``. Import them
from ``skyrl_train.algorithms`` (or upstream's ``skyrl_train.utils.ppo_utils``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, ClassVar

__all__ = [
    "AdvantageEstimatorRegistry",
    "PolicyLossRegistry",
    "register_advantage_estimator",
    "register_policy_loss",
]


_PACKAGE = __name__.split(".")[0]


class _FunctionRegistry:
    """A class-level name -> callable map. Each subclass gets its own storage."""

    _functions: ClassVar[dict[str, Callable[..., Any]]]
    _kind: ClassVar[str] = "function"
    # Module that registers the built-ins; imported on first use so that importing only this module works.
    _builtins_module: ClassVar[str | None] = None
    _builtins_loaded: ClassVar[bool]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._functions = {}
        cls._builtins_loaded = False

    @classmethod
    def _ensure_builtins(cls) -> None:
        if not cls._builtins_loaded and cls._builtins_module is not None:
            cls._builtins_loaded = True
            importlib.import_module(cls._builtins_module)

    @classmethod
    def register(cls, name: str, fn: Callable[..., Any] | None = None) -> Any:
        """Register ``fn`` under ``name``. Without ``fn``, return a decorator that registers the decorated function.

        Raises:
            ValueError: if ``name`` is already registered.
            TypeError: if ``fn`` is not callable.
        """
        name = str(name)

        def _do_register(func: Callable[..., Any]) -> Callable[..., Any]:
            if not callable(func):
                raise TypeError(f"{cls._kind} {name!r} must be callable, got {type(func).__name__}")
            cls._ensure_builtins()
            if name in cls._functions:
                raise ValueError(
                    f"{cls._kind} {name!r} is already registered; call {cls.__name__}.unregister({name!r}) first"
                )
            cls._functions[name] = func
            return func

        if fn is None:
            return _do_register
        return _do_register(fn)

    @classmethod
    def get(cls, name: str) -> Callable[..., Any]:
        """Return the function registered under ``name``.

        Raises:
            ValueError: if no function has that name; the message lists the available names.
        """
        cls._ensure_builtins()
        name = str(name)
        if name not in cls._functions:
            raise ValueError(f"Unknown {cls._kind} {name!r}. Available: {', '.join(cls.list_available())}")
        return cls._functions[name]

    @classmethod
    def unregister(cls, name: str) -> None:
        """Remove ``name`` from the registry. Raises ``ValueError`` if it is not registered."""
        cls._ensure_builtins()
        name = str(name)
        if name not in cls._functions:
            raise ValueError(f"Cannot unregister unknown {cls._kind} {name!r}")
        del cls._functions[name]

    @classmethod
    def list_available(cls) -> list[str]:
        """Names of all registered functions, sorted."""
        cls._ensure_builtins()
        return sorted(cls._functions)

    @classmethod
    def is_registered(cls, name: str) -> bool:
        """Whether ``name`` is registered."""
        cls._ensure_builtins()
        return str(name) in cls._functions

    @classmethod
    def custom_functions(cls) -> dict[str, Callable[..., Any]]:
        """Name -> function of every registration whose function is defined outside ``skyrl_train`` (a user's
        estimator or loss, or a user's replacement of a built-in name): what another process lacks until the code
        that registered it runs there."""
        cls._ensure_builtins()
        return {
            name: fn
            for name, fn in cls._functions.items()
            if not getattr(fn, "__module__", "").startswith(f"{_PACKAGE}.")
        }

    @classmethod
    def install(cls, functions: dict[str, Callable[..., Any]]) -> None:
        """Make ``functions`` (another process's `custom_functions`) the registrations of their names here, replacing
        what these names hold: the same function when this process imported the module that registers it too."""
        cls._ensure_builtins()
        cls._functions.update(functions)


class AdvantageEstimatorRegistry(_FunctionRegistry):
    """Registry of advantage estimators (``trainer.algorithm.advantage_estimator``)."""

    _kind = "advantage estimator"
    _builtins_module = "skyrl_train.algorithms.advantages"


class PolicyLossRegistry(_FunctionRegistry):
    """Registry of policy losses (``trainer.algorithm.policy_loss_type``)."""

    _kind = "policy loss"
    _builtins_module = "skyrl_train.algorithms.policy_losses"


def register_advantage_estimator(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator form of ``AdvantageEstimatorRegistry.register(name)`` (upstream's spelling)."""
    return AdvantageEstimatorRegistry.register(name)


def register_policy_loss(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator form of ``PolicyLossRegistry.register(name)`` (upstream's spelling)."""
    return PolicyLossRegistry.register(name)
