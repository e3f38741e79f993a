"""`GSM8kEnv`: single-turn math; reward 1.0 when the `#### <number>` answer equals the ground truth."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from skyrl_gym.common.config import checked_block
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
from skyrl_gym.envs.gsm8k.scoring import compute_score, extract_solution
from skyrl_gym.envs.utils import required_extra


class GSM8kEnv(BaseTextEnv):
    """One step: the response is scored against `extras["reward_spec"]["ground_truth"]` and the episode ends.

    It reads no config: a non-empty `env_config` (an `environment.skyrl_gym.gsm8k` block) is refused."""

    env_config_keys: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None):
        super().__init__()
        checked_block(env_config, self.env_config_keys, f"env_config of {type(self).__name__}")
        self.ground_truth = str(required_extra(extras, "reward_spec", "ground_truth")).strip()

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        return BaseTextEnvStepOutput(
            observations=[],
            reward=compute_score(action, self.ground_truth),
            done=True,
            metadata={"parsed_answer": extract_solution(action), "ground_truth": self.ground_truth},
        )
