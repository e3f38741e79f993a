"""Training with `generator.backend=vllm` end to end through `BasePPOExp` (real vLLM engine actors on a real local Ray
cluster, the tiny random Llama, LoRA): the engines start, every step's rollouts come from them, and after each update
the new adapter reaches them (each step's rollouts carry the previous step's weight version).

Marked `vllm`; run with the vLLM venv (see test_vllm_engine.py).
"""

from __future__ import annotations

import json
import os

import pytest

from skyrl_gym.envs.gsm8k.synthetic_data import generate_dataset, write_dataset
from skyrl_train.config import load_config
from skyrl_train.entrypoints.main_base import BasePPOExp
from skyrl_train.models.tiny import make_tiny_causal_lm

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]


@pytest.fixture
def ray_cluster():
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(address="local", num_cpus=2, include_dashboard=False)
    yield
    ray.shutdown()


def test_a_lora_run_generates_every_step_with_the_previous_steps_weights(ray_cluster, tmp_path):
    model = make_tiny_causal_lm(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, intermediate_size=256)
    write_dataset(generate_dataset(train_size=4, val_size=2, seed=3, few_shot=0), tmp_path / "data")
    cfg = load_config(
        [
            f"trainer.policy.model.path={model}",
            "generator.backend=vllm",
            "trainer.placement.colocate_all=false",
            "generator.model_dtype=float32",
            "+generator.engine_init_kwargs.max_model_len=1024",
            f"+generator.engine_init_kwargs.kv_cache_memory_bytes={256 * 2**20}",
            "trainer.policy.model.lora.rank=8",
            "trainer.policy.model.lora.alpha=16",
            f"trainer.policy.model.lora.lora_sync_path={tmp_path / 'lora'}",
            "trainer.bf16=false",
            "trainer.gradient_checkpointing=false",
            f"data.train_data=[{tmp_path / 'data' / 'train.parquet'}]",
            "data.val_data=[]",
            "trainer.train_batch_size=2",
            "trainer.policy_mini_batch_size=2",
            "trainer.micro_train_batch_size_per_gpu=4",
            "trainer.micro_forward_batch_size_per_gpu=4",
            "trainer.algorithm.use_kl_loss=false",
            "trainer.policy.optimizer_config.lr=1e-2",
            "generator.n_samples_per_prompt=2",
            "generator.sampling_params.max_generate_length=8",
            "trainer.eval_interval=-1",
            "trainer.ckpt_interval=-1",
            "trainer.logger=jsonl",
            f"trainer.ckpt_path={tmp_path / 'ckpts'}",
            f"trainer.export_path={tmp_path / 'exports'}",
        ]
    )
    versions: list[list[int | None]] = []

    class Recorded(BasePPOExp):
        def get_generator(self, cfg, tokenizer, engine):
            generator = super().get_generator(cfg, tokenizer, engine)
            generate = generator.generate

            async def recorded(generator_input):
                output = await generate(generator_input)
                versions.append(list(output["weight_versions"]))
                return output

            generator.generate = recorded
            return generator

    Recorded(cfg).run()
    assert versions == [[0, 0, 0, 0], [1, 1, 1, 1]]  # 4 prompts / 2 per step = 2 steps of 2 x 2 trajectories
    steps = [json.loads(line) for line in (tmp_path / "exports" / "metrics.jsonl").read_text().splitlines()]
    assert [row["trainer/global_step"] for row in steps if "trainer/global_step" in row] == [1, 2]
    assert (tmp_path / "lora" / "weight_version_2" / "adapter_model.safetensors").exists()
