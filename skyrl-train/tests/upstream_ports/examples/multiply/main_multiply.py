"""Train on a custom env registered in the Ray task (upstream's pattern: the env is not part of skyrl-gym).

python -m examples.multiply.main_multiply data.train_data="['multiply.jsonl']" environment.env_class=multiply ...
"""

import hydra
import ray
from omegaconf import DictConfig

from skyrl_gym.envs import register
from skyrl_train.entrypoints.main_base import BasePPOExp, config_dir, validate_cfg
from skyrl_train.utils import initialize_ray


@ray.remote(num_cpus=1)
def skyrl_entrypoint(cfg: DictConfig):
    # Registered here, in the process that runs the generator (the driver's registrations stay in the driver).
    register(id="multiply", entry_point="examples.multiply.env:MultiplyEnv")
    exp = BasePPOExp(cfg)
    exp.run()


@hydra.main(config_path=config_dir, config_name="ppo_base_config", version_base=None)
def main(cfg: DictConfig) -> None:
    validate_cfg(cfg)
    initialize_ray(cfg)
    ray.get(skyrl_entrypoint.remote(cfg))


if __name__ == "__main__":
    main()
