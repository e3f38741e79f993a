"""A custom generator from a `get_generator(cfg, tokenizer, inference_engine_client)` override: it wraps the
SkyRL-Gym generator and reports, with every batch, a tag its runs add (`+generator.run_tag=...`) and how many batches
it generated.

python -m examples.custom_generator.main_custom_generator +generator.run_tag=7 ...
"""

import hydra
import ray
from omegaconf import DictConfig

from skyrl_train.entrypoints.main_base import BasePPOExp, config_dir, validate_cfg
from skyrl_train.generators.base import GeneratorInput, GeneratorInterface, GeneratorOutput
from skyrl_train.generators.skyrl_gym_generator import SkyRLGymGenerator
from skyrl_train.utils import initialize_ray


class CountingGenerator(GeneratorInterface):
    def __init__(self, inner: GeneratorInterface, run_tag: float):
        self.inner = inner
        self.run_tag = run_tag
        self.batches = 0

    async def generate(self, input_batch: GeneratorInput) -> GeneratorOutput:
        output = await self.inner.generate(input_batch)
        self.batches += 1
        metrics = dict(output.get("rollout_metrics") or {})
        metrics.update({"counting_generator/batches": self.batches, "counting_generator/run_tag": self.run_tag})
        output["rollout_metrics"] = metrics
        return output


class CountingExp(BasePPOExp):
    def get_generator(self, cfg, tokenizer, inference_engine_client):
        inner = SkyRLGymGenerator(cfg.generator, cfg.environment.skyrl_gym, inference_engine_client, tokenizer)
        return CountingGenerator(inner, float(cfg.generator.run_tag))


@ray.remote(num_cpus=1)
def skyrl_entrypoint(cfg: DictConfig):
    exp = CountingExp(cfg)
    exp.run()


@hydra.main(config_path=config_dir, config_name="ppo_base_config", version_base=None)
def main(cfg: DictConfig) -> None:
    validate_cfg(cfg)
    initialize_ray(cfg)
    ray.get(skyrl_entrypoint.remote(cfg))


if __name__ == "__main__":
    main()
