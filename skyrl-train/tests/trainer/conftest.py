from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from skyrl_gym.envs.gsm8k.synthetic_data import generate_dataset, write_dataset
from skyrl_train.config import load_config
from skyrl_train.entrypoints.main_base import BasePPOExp
from skyrl_train.generators.base import GeneratorOutput
from skyrl_train.testing import TINY_RUN_OVERRIDES, tiny_model  # noqa: F401
from skyrl_train.testing.s3 import s3_bucket, s3_server  # noqa: F401


@dataclass
class StepRun:
    """What one training step of `run_one_step` left behind."""

    metrics: dict[str, float]
    """The step's logged metrics (the `metrics.jsonl` row of step 1)."""
    generated: GeneratorOutput
    """The generator's output the step trained on (after `edit_output`)."""
    weights: dict[str, torch.Tensor]
    """The policy's trainable weights after the step."""


def run_recorded(
    cfg, on_generation: Callable[[dict, GeneratorOutput], None]
) -> tuple[list[dict], dict[str, torch.Tensor]]:
    """Run `cfg` through ``BasePPOExp``, calling ``on_generation(generator_input, output)`` after every generator
    call (it may change the output in place before training); returns the `metrics.jsonl` rows and the policy's
    trainable weights at the end."""
    captured = {}

    class Experiment(BasePPOExp):
        def get_generator(self, cfg, tokenizer, engine):
            generator = super().get_generator(cfg, tokenizer, engine)
            generate = generator.generate

            async def recorded(generator_input):
                output = await generate(generator_input)
                on_generation(generator_input, output)
                return output

            generator.generate = recorded
            return generator

        def get_workers(self, num_training_steps):
            workers = super().get_workers(num_training_steps)
            captured["policy"] = workers[0]
            return workers

    Experiment(cfg).run()
    metrics_file = Path(cfg.trainer.export_path) / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics_file.read_text(encoding="utf-8").splitlines()]
    model = captured["policy"].model
    return rows, {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}


@pytest.fixture
def run_one_step(tmp_path, tiny_model):  # noqa: F811
    """``run_one_step(name, *overrides, edit_output=None) -> StepRun``: one real training step (2 gsm8k prompts x 2
    samples, hf engine, tiny model in fp32, full fine-tuning, one mini-batch, no eval or checkpoints) through
    ``BasePPOExp``. ``edit_output(GeneratorOutput)`` may change the generator's output in place before training;
    runs with the same overrides generate the same rollouts (same seeds)."""
    write_dataset(generate_dataset(train_size=2, val_size=1, seed=3, few_shot=0), tmp_path / "data")

    def run(name: str, *overrides: str, edit_output: Callable[[GeneratorOutput], None] | None = None) -> StepRun:
        out = tmp_path / name
        cfg = load_config(
            [
                f"data.train_data=[{tmp_path / 'data' / 'train.parquet'}]",
                f"trainer.policy.model.path={tiny_model}",
                *TINY_RUN_OVERRIDES,
                "trainer.train_batch_size=2",  # 2 prompts x 2 samples in one mini-batch, 2 rows per micro-batch
                "trainer.policy_mini_batch_size=2",
                "trainer.micro_train_batch_size_per_gpu=2",
                "trainer.micro_forward_batch_size_per_gpu=2",
                "generator.sampling_params.max_generate_length=8",
                "trainer.policy.optimizer_config.lr=1e-3",
                "trainer.max_prompt_length=1024",
                "trainer.algorithm.use_kl_loss=false",
                "trainer.eval_interval=-1",
                "trainer.ckpt_interval=-1",
                "trainer.hf_save_interval=-1",
                "trainer.logger=jsonl",
                f"trainer.ckpt_path={out / 'ckpts'}",
                f"trainer.export_path={out / 'exports'}",
                *overrides,
            ]
        )
        captured = {}

        def keep(generator_input, output: GeneratorOutput) -> None:
            if edit_output is not None:
                edit_output(output)
            captured["generated"] = output

        rows, weights = run_recorded(cfg, keep)
        (metrics,) = [row for row in rows if "policy/policy_loss" in row]
        return StepRun(metrics, captured["generated"], weights)

    return run


class RolloutReplay:
    """The same rollouts in several runs (continuous batching makes sampling depend on request timing): ``record``
    sets the rewards (by default 1, 0, 0, 1, so that both GRPO groups of the 4 rows carry a signal: the random tiny
    model never solves gsm8k) and keeps the output; ``replay`` puts a copy of it in place of a new output (and
    returns it)."""

    def __init__(self, rewards: tuple[float, ...] = (1.0, 0.0, 0.0, 1.0)):
        self.rewards = rewards
        self.recorded: GeneratorOutput | None = None

    def record(self, output: GeneratorOutput) -> None:
        output["rewards"] = list(self.rewards)
        self.recorded = copy.deepcopy(output)

    def replay(self, output: GeneratorOutput) -> GeneratorOutput:
        output.clear()
        output.update(copy.deepcopy(self.recorded))
        return output


@pytest.fixture
def replay() -> RolloutReplay:
    """A ``RolloutReplay`` for ``run_one_step(..., edit_output=replay.record / replay.replay)``."""
    return RolloutReplay()


@pytest.fixture
def max_relative_difference():
    """``max_relative_difference(a, b)``: the largest ``‖a[k] − b[k]‖ / ‖b[k]‖`` over the tensors of two weight dicts
    with the same names."""

    def difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
        assert a.keys() == b.keys()
        return max(float((a[name] - b[name]).norm() / b[name].norm()) for name in b)

    return difference
