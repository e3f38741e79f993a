"""skyrl_train: multi-turn GRPO/PPO training of tool-using language models."""

__version__ = "0.2.0"
