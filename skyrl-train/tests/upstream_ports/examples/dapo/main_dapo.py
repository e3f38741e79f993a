"""DAPO's soft overlong punishment in a trainer subclass, with its settings added on the command line; sequence-level
rewards, as upstream's DAPO runs (`generator.batched=true`).

python -m examples.dapo.main_dapo generator.batched=true +trainer.algorithm.overlong_buffer.len=512 \
    +trainer.algorithm.overlong_buffer.penalty_factor=1.0 ...
"""

import hydra
import ray
import torch
from omegaconf import DictConfig

from skyrl_train.entrypoints.main_base import BasePPOExp, config_dir, validate_cfg
from skyrl_train.generators.base import GeneratorInterface, GeneratorOutput
from skyrl_train.trainer import RayPPOTrainer
from skyrl_train.utils import initialize_ray


class DAPOTrainer(RayPPOTrainer):
    """Penalises responses in the last `overlong_buffer.len` tokens before `max_generate_length`, linearly up to
    `overlong_buffer.penalty_factor`; a longer response's reward becomes 0."""

    @torch.no_grad()
    def postprocess_generator_output(self, generator_output: GeneratorOutput, uids: list[str]) -> GeneratorOutput:
        buffer_len = self.cfg.trainer.algorithm.overlong_buffer.len
        penalty_factor = self.cfg.trainer.algorithm.overlong_buffer.penalty_factor
        max_length = self.cfg.generator.sampling_params.max_generate_length
        rewards = generator_output["rewards"]
        if any(isinstance(reward, list) for reward in rewards):
            raise ValueError("DAPOTrainer penalises one reward per response: run with generator.batched=true")
        for i, response in enumerate(generator_output["response_ids"]):
            exceed = len(response) - (max_length - buffer_len)
            if len(response) > max_length:
                rewards[i] = 0.0
            elif exceed > 0:
                rewards[i] -= exceed / buffer_len * penalty_factor
        generator_output["rewards"] = rewards
        return super().postprocess_generator_output(generator_output, uids)


class DAPOExp(BasePPOExp):
    def get_trainer(
        self,
        cfg,
        tracker,
        tokenizer,
        train_dataset,
        eval_dataset,
        inference_engine_client,
        generator: GeneratorInterface,
        colocate_pg,
    ):
        return DAPOTrainer(
            cfg=cfg,
            tracker=tracker,
            tokenizer=tokenizer,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            inference_engine_client=inference_engine_client,
            generator=generator,
            colocate_pg=colocate_pg,
        )


@ray.remote(num_cpus=1)
def skyrl_entrypoint(cfg: DictConfig):
    exp = DAPOExp(cfg)
    exp.run()


@hydra.main(config_path=config_dir, config_name="ppo_base_config", version_base=None)
def main(cfg: DictConfig) -> None:
    validate_cfg(cfg)
    initialize_ray(cfg)
    ray.get(skyrl_entrypoint.remote(cfg))


if __name__ == "__main__":
    main()
