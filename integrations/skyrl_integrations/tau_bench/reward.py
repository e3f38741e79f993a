"""The episode reward, tau2's way: the product of the components named in the task's ``reward_basis``.

- ``DB``: 1 when the hash of the agent's final DB equals the hash after replaying the gold actions on a fresh DB
  (only writes matter: reads, failed writes and `calculate` never change the DB).
- ``COMMUNICATE``: 1 when every ``communicate_info`` string occurs in some agent text message, compared
  lower-cased, with commas removed from the message (not from the string).

``NL_ASSERTION`` needs an LLM judge, and ``ENV_ASSERTION`` / ``ACTION`` are not used by retail or airline; a task
whose basis names one of them is refused with an error (never silently passed). Its ``nl_assertions`` outside the
basis are diagnostics in tau2 and are not checked here (counted in the metrics as ``nl_assertions_unchecked``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from skyrl_integrations.tau_bench.domains import Domain
from skyrl_integrations.tau_bench.toolkit import EpisodeToolkit, gold_db_hash

SUPPORTED_COMPONENTS = ("DB", "COMMUNICATE")
UNSUPPORTED_COMPONENTS = ("NL_ASSERTION", "ENV_ASSERTION", "ACTION")
SUCCESS_TOLERANCE = 1e-6
"""A reward within this of 1 is a success (tau2's pass^k threshold)."""


@dataclasses.dataclass(frozen=True)
class GroundTruth:
    """What a task is graded against (the ``reward_spec.ground_truth`` of a converted row)."""

    actions: tuple[dict[str, Any], ...]
    """Gold tool calls, ``{"name", "arguments"}``, in order."""
    communicate_info: tuple[str, ...] = ()
    nl_assertions: tuple[str, ...] = ()
    reward_basis: tuple[str, ...] = SUPPORTED_COMPONENTS

    @classmethod
    def from_task(cls, task: Any) -> GroundTruth:
        """From a `tau2` Task's ``evaluation_criteria``."""
        criteria = task.evaluation_criteria
        return cls.parse(
            {
                "actions": [{"name": a.name, "arguments": a.arguments} for a in criteria.actions or []],
                "communicate_info": list(criteria.communicate_info or []),
                "nl_assertions": list(criteria.nl_assertions or []),
                "reward_basis": [str(getattr(b, "value", b)) for b in criteria.reward_basis],
            },
            where=f"task {task.id}",
        )

    @classmethod
    def parse(cls, value: Any, where: str = "reward_spec.ground_truth") -> GroundTruth:
        """Validate a ground-truth mapping; errors name `where` and the bad key."""
        if not isinstance(value, Mapping):
            raise ValueError(f"{where}: expected a mapping, got {type(value).__name__}")
        unknown = sorted(set(value) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {unknown}")
        actions = value.get("actions")
        if not isinstance(actions, Sequence) or isinstance(actions, str):
            raise ValueError(f"{where}.actions: expected a list of {{'name', 'arguments'}}, got {actions!r}")
        for i, action in enumerate(actions):
            if (
                not isinstance(action, Mapping)
                or not isinstance(action.get("name"), str)
                or not isinstance(action.get("arguments"), Mapping)
            ):
                raise ValueError(f"{where}.actions[{i}]: expected {{'name': str, 'arguments': dict}}, got {action!r}")
        basis = tuple(_strings(value.get("reward_basis", SUPPORTED_COMPONENTS), f"{where}.reward_basis"))
        unsupported = sorted(set(basis) & set(UNSUPPORTED_COMPONENTS))
        if unsupported:
            raise ValueError(
                f"{where}.reward_basis: {unsupported} cannot be graded here (NL_ASSERTION needs an LLM judge; "
                f"ENV_ASSERTION / ACTION are not implemented); supported: {list(SUPPORTED_COMPONENTS)}"
            )
        unknown_basis = sorted(set(basis) - set(SUPPORTED_COMPONENTS))
        if unknown_basis:
            raise ValueError(f"{where}.reward_basis: unknown component(s) {unknown_basis}")
        return cls(
            actions=tuple({"name": a["name"], "arguments": dict(a["arguments"])} for a in actions),
            communicate_info=tuple(_strings(value.get("communicate_info") or [], f"{where}.communicate_info")),
            nl_assertions=tuple(_strings(value.get("nl_assertions") or [], f"{where}.nl_assertions")),
            reward_basis=basis,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "actions": [dict(a) for a in self.actions],
            "communicate_info": list(self.communicate_info),
            "nl_assertions": list(self.nl_assertions),
            "reward_basis": list(self.reward_basis),
        }


@dataclasses.dataclass(frozen=True)
class RewardResult:
    reward: float
    components: dict[str, float]
    """Each component of the basis -> 0.0 / 1.0."""
    missing_info: tuple[str, ...] = ()
    """The ``communicate_info`` strings no agent message contained."""

    @property
    def success(self) -> bool:
        return abs(self.reward - 1.0) < SUCCESS_TOLERANCE

    @property
    def failed_components(self) -> list[str]:
        return [name for name, value in self.components.items() if value < 1.0]


def compute_reward(
    truth: GroundTruth, domain: Domain, toolkit: EpisodeToolkit, agent_messages: Sequence[str]
) -> RewardResult:
    """Grade a finished episode: `toolkit` holds the agent's DB, `agent_messages` its texts to the user."""
    components: dict[str, float] = {}
    missing: tuple[str, ...] = ()
    if "DB" in truth.reward_basis:
        components["DB"] = float(toolkit.db_hash() == gold_db_hash(domain, truth.actions))
    if "COMMUNICATE" in truth.reward_basis:
        missing = tuple(info for info in truth.communicate_info if not communicated(info, agent_messages))
        components["COMMUNICATE"] = float(not missing)
    reward = 1.0
    for value in components.values():
        reward *= value
    return RewardResult(reward, components, missing)


def communicated(info: str, agent_messages: Sequence[str]) -> bool:
    """Whether `info` occurs in some agent message (lower-cased; commas removed from the message only)."""
    needle = info.lower()
    return any(needle in message.lower().replace(",", "") for message in agent_messages)


def _strings(value: Any, where: str) -> list[str]:
    if isinstance(value, str) or not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where}: expected a list of strings, got {value!r}")
    return list(value)
