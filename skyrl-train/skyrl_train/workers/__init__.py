"""Workers: the models a training step runs (policy, reference, critic), on one process.

- ``PolicyWorker`` (policy.py): old logprobs, PPO updates (LoRA or full fine-tuning), checkpoints, HF export;
- ``RefWorker`` (ref.py): reference logprobs; with LoRA the policy's module with the adapter disabled;
- ``CriticWorker`` (critic.py): values and clipped value-loss updates for ``gae``;
- forward.py: response logprobs / entropy from a causal LM (position ids from the attention mask, temperature);
  lm_head.py: the LM head a chunk of rows at a time (no ``[tokens, vocab]`` logits held); packing.py: sample packing;
  shared_prefix.py: a prompt prefix all rows share, run once;
- trainable.py: the shared optimizer, update loop and checkpoint layout; metrics.py: how metrics combine;
- builder.py: ``WorkerBuilder``, the one place that turns the trainer config into these workers (the strategies
  and the fsdp2 ranks use it); protocols.py: ``Policy`` / ``Reference`` / ``Critic``, what the trainer drives.

Public methods take ``TrainingInputBatch`` objects and return tensors or flat metric dicts, so a multi-process
strategy (FSDP2, Ray actors) can drive the same methods per rank.
"""

from skyrl_train.workers.critic import CriticWorker, ValueModel
from skyrl_train.workers.forward import batched_response_logprobs, position_ids_from_attention_mask, response_logprobs
from skyrl_train.workers.policy import PolicyWorker
from skyrl_train.workers.ref import RefWorker

__all__ = [
    "CriticWorker",
    "PolicyWorker",
    "RefWorker",
    "ValueModel",
    "batched_response_logprobs",
    "position_ids_from_attention_mask",
    "response_logprobs",
]
