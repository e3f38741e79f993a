"""The episode reward from tau2's own evaluators: the product of the components named in the task's
``reward_basis``, as tau2's ``evaluate_simulation`` combines them.

- ``DB``: tau2's `EnvironmentEvaluator` replays the agent's tool calls (from the episode's `Trajectory`) on one
  fresh environment and the gold actions on another, and compares their DB hashes (only writes matter: reads,
  failed writes and `calculate` never change the DB). A replayed call whose answer differs from the one recorded
  in the episode raises tau2's ValueError (its determinism check).
- ``COMMUNICATE``: tau2's `CommunicateEvaluator`: every ``communicate_info`` string occurs in some agent message,
  compared lower-cased, with commas removed from the message (not from the string).

``evaluate_simulation`` itself is not called: its module imports tau2's LLM stack (litellm, for the NL judge and
its agents), which is not installed. ``NL_ASSERTION`` needs that LLM judge, and ``ENV_ASSERTION`` / ``ACTION`` need
criteria a row's `GroundTruth` does not carry (retail and airline use neither); a task whose basis names one of
them is refused with an error (never silently passed). Its ``nl_assertions`` outside the basis are diagnostics in
tau2 and are not checked here (counted in the metrics as ``nl_assertions_unchecked``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from skyrl_integrations.tau_bench.domains import Domain, import_tau2

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
                f"ENV_ASSERTION / ACTION need criteria a ground truth does not carry); "
                f"supported: {list(SUPPORTED_COMPONENTS)}"
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

    def criteria(self) -> Any:
        """As tau2's `EvaluationCriteria` (each gold action requested by the agent, as in every retail and airline
        task)."""
        tasks = import_tau2("tau2.data_model.tasks")
        return tasks.EvaluationCriteria(
            actions=[
                tasks.Action(action_id=str(i), name=action["name"], arguments=dict(action["arguments"]))
                for i, action in enumerate(self.actions)
            ],
            communicate_info=list(self.communicate_info),
            nl_assertions=list(self.nl_assertions),
            reward_basis=list(self.reward_basis),
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


def compute_reward(domain: Domain, task: Any, truth: GroundTruth, trajectory: Sequence[Any]) -> RewardResult:
    """Grade a finished episode with tau2's evaluators: `trajectory` is its tau2 messages (`Trajectory.messages`),
    `task` the tau2 task, graded against `truth` (which replaces the task's own evaluation criteria)."""
    environment_evaluator = import_tau2("tau2.evaluator.evaluator_env").EnvironmentEvaluator
    communicate_evaluator = import_tau2("tau2.evaluator.evaluator_communicate").CommunicateEvaluator
    graded = task.model_copy(update={"evaluation_criteria": truth.criteria()})
    messages = list(trajectory)
    infos = []
    if "DB" in truth.reward_basis:
        infos.append(
            environment_evaluator.calculate_reward(
                environment_constructor=domain.make_environment, task=graded, full_trajectory=messages
            )
        )
    if "COMMUNICATE" in truth.reward_basis:
        infos.append(communicate_evaluator.calculate_reward(task=graded, full_trajectory=messages))
    reward = 1.0
    for info in infos:
        reward *= info.reward
    components = {str(kind.value): value for info in infos for kind, value in (info.reward_breakdown or {}).items()}
    missing = tuple(check.info for info in infos for check in info.communicate_checks or [] if not check.met)
    return RewardResult(reward, components, missing)


def _strings(value: Any, where: str) -> list[str]:
    if isinstance(value, str) or not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where}: expected a list of strings, got {value!r}")
    return list(value)
