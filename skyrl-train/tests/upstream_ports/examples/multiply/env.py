"""A one-turn multiplication env: the model answers `a * b` in `\\boxed{}`; reward 1.0 if the product is right."""

import re
from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

_BOXED = re.compile(r"\\boxed\{\s*(-?\d+)\s*\}")


class MultiplyEnv(BaseTextEnv):
    def __init__(self, env_config: Any = None, extras: dict[str, Any] = {}):  # noqa: B006 (upstream's signature)
        super().__init__()
        self.ground_truth = int(extras["reward_spec"]["ground_truth"])
        self.answered = False

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        match = _BOXED.search(action)
        self.answered = match is not None
        reward = 1.0 if match and int(match.group(1)) == self.ground_truth else 0.0
        return BaseTextEnvStepOutput(observations=[], reward=reward, done=True, metadata={})

    def get_metrics(self) -> dict[str, Any]:
        return {"turns": self.turns, "answered": self.answered}
