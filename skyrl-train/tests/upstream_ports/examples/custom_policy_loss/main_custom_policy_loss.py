"""Train with a custom policy loss in upstream skyrl-train 0.3's form: it reduces the loss itself and returns its clip
ratio as a float.

python -m examples.custom_policy_loss.main_custom_policy_loss trainer.algorithm.policy_loss_type=reinforce ...
"""

import hydra
import ray
import torch
from omegaconf import DictConfig

from skyrl_train.entrypoints.main_base import BasePPOExp, config_dir, validate_cfg
from skyrl_train.utils import initialize_ray
from skyrl_train.utils.ppo_utils import PolicyLossRegistry


def compute_reinforce_policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    config: DictConfig,
    loss_mask: torch.Tensor | None = None,
):
    """REINFORCE, -log pi(a) * A, averaged over the sampled tokens; nothing is clipped."""
    loss = -(log_probs * advantages * loss_mask).sum() / loss_mask.sum().clamp(min=1)
    return loss, 0.0


PolicyLossRegistry.register("reinforce", compute_reinforce_policy_loss)


@ray.remote(num_cpus=1)
def skyrl_entrypoint(cfg: DictConfig):
    exp = BasePPOExp(cfg)
    exp.run()


@hydra.main(config_path=config_dir, config_name="ppo_base_config", version_base=None)
def main(cfg: DictConfig) -> None:
    validate_cfg(cfg)
    initialize_ray(cfg)
    ray.get(skyrl_entrypoint.remote(cfg))


if __name__ == "__main__":
    main()
