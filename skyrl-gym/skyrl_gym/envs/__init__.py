"""Built-in environments, registered when skyrl_gym is imported (modules load lazily on `make`)."""

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, ConversationType, MessageType
from skyrl_gym.envs.registration import register

register(id="gsm8k", entry_point="skyrl_gym.envs.gsm8k.env:GSM8kEnv")
register(id="gsm8k_multi_turn", entry_point="skyrl_gym.envs.gsm8k_multi_turn.env:GSM8kMultiTurnEnv")
register(id="text2sql", entry_point="skyrl_gym.envs.sql.env:SQLEnv")

__all__ = ["BaseTextEnv", "BaseTextEnvStepOutput", "ConversationType", "MessageType"]
