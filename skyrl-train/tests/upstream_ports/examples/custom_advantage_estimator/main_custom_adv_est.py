"""Train with a custom advantage estimator registered in the driver, at module level.

python -m examples.custom_advantage_estimator.main_custom_adv_est \
    trainer.algorithm.advantage_estimator=fixed_baseline +trainer.algorithm.baseline=0.5 ...
"""

import hydra
import ray
import torch
from omegaconf import DictConfig

from skyrl_train.entrypoints.main_base import BasePPOExp, config_dir, validate_cfg
from skyrl_train.utils import initialize_ray
from skyrl_train.utils.ppo_utils import register_advantage_estimator


@register_advantage_estimator("fixed_baseline")
def compute_fixed_baseline_advantage(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index, config, **kwargs
):
    """REINFORCE with a fixed baseline: every sampled token's advantage is its trajectory's reward minus
    `trainer.algorithm.baseline`, a key this script's runs add (`+trainer.algorithm.baseline=...`)."""
    with torch.no_grad():
        scores = (token_level_rewards * response_mask).sum(dim=-1, keepdim=True)
        advantages = (scores - config.baseline) * response_mask
        return advantages, advantages.clone()


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
