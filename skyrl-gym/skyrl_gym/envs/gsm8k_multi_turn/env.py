"""`GSM8kMultiTurnEnv`: the model gets up to `max_turns` attempts at a GSM8K problem.

Every turn is rewarded: 1.0 for the correct answer, `0.2 / max_turns` for a well-formatted wrong
answer (`#### <number>` present), 0 otherwise. The episode ends on a correct answer or after
`max_turns` turns; until then the env replies with a nudge, and before the last turn asks for the
final answer only.
"""

from __future__ import annotations

from collections.abc import Mapping
from statistics import fmean
from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnvStepOutput
from skyrl_gym.envs.gsm8k.env import GSM8kEnv
from skyrl_gym.envs.gsm8k.scoring import compute_score, extract_solution

DEFAULT_MAX_TURNS = 5
FORMAT_REWARD_BUDGET = 0.2
"""A wrong but well-formatted answer earns this much spread over the episode: 0.2 / max_turns per turn."""

NUDGE = (
    "That is not correct yet. Please think through the problem again step by step, explain your reasoning, "
    "and end your response with the final answer in the form #### ANSWER."
)
FINAL_NUDGE = "This is your last attempt. Give only the final answer, in the form #### ANSWER."


def _max_turns(extras: Mapping[str, Any] | None) -> int:
    extras = extras or {}
    value = extras.get("max_turns")
    if value is None:
        extra_info = extras.get("extra_info")
        value = extra_info.get("max_turns") if isinstance(extra_info, Mapping) else None
    value = DEFAULT_MAX_TURNS if value is None else int(value)
    if value < 1:
        raise ValueError(f"max_turns must be >= 1, got {value}")
    return value


class GSM8kMultiTurnEnv(GSM8kEnv):
    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None):
        super().__init__(env_config, extras)
        self.max_turns = _max_turns(extras)

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        answer = extract_solution(action)
        reward = compute_score(action, self.ground_truth, format_score=FORMAT_REWARD_BUDGET / self.max_turns)
        correct = reward == 1.0
        done = correct or self.turns >= self.max_turns
        if done:
            observations = []
        else:
            last_turn_next = self.turns == self.max_turns - 1
            observations = [{"role": "user", "content": FINAL_NUDGE if last_turn_next else NUDGE}]
        return BaseTextEnvStepOutput(
            observations=observations,
            reward=reward,
            done=done,
            metadata={"parsed_answer": answer, "ground_truth": self.ground_truth, "turn": self.turns},
        )

    def get_metrics(self) -> dict[str, Any]:
        return {"steps": self.turns}

    @staticmethod
    def aggregate_metrics(metrics: list[dict[str, Any]]) -> dict[str, Any]:
        steps = [m["steps"] for m in metrics if "steps" in m]
        return {"avg_steps": fmean(steps)} if steps else {}
