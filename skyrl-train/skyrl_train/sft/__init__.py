"""Supervised fine-tuning (SFT) on conversations, through the RL trainer's workers, checkpoints and tracking.

- conversations: rows in the chat `messages` format, checked row by row (assistant `tool_calls` rendered as text);
- encoding: conversations tokenised exactly as the generator tokenises an episode, and the dataset of them;
- trainer: `SFTTrainer`, the loop (`python -m skyrl_train.entrypoints.main_sft`);
- warm_start: SFT on the policy before the first RL step of a `main_base` job (`trainer.warm_start`).

See skyrl-train/docs/sft.md.
"""
