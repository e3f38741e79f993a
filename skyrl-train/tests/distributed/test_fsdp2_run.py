"""`trainer.strategy=fsdp2` end to end through Ray, as a GPU user's first fsdp2 run would go: the gsm8k recipe (GRPO
with LoRA on the tiny model) for 2 steps in a process of its own, a checkpoint at every step, the run's HF export, and
`export_hf` of the last checkpoint giving the same model. One rank per GPU on a GPU machine (bf16 mixed precision over
fp32 masters, NCCL, the driver's hf engine copy on the GPU), 2 gloo ranks in fp32 on the CPU."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from skyrl_gym.envs.gsm8k.synthetic_data import generate_dataset, write_dataset
from skyrl_train.entrypoints.export_hf import export_checkpoint
from skyrl_train.testing import TINY_RUN_OVERRIDES, tiny_model  # noqa: F401
from skyrl_train.testing.ray import fsdp2_overrides, machine_gpus, subprocess_env

pytestmark = [pytest.mark.slow, pytest.mark.gpu, pytest.mark.timeout(900)]


def test_the_gsm8k_recipe_trains_two_steps_checkpoints_and_exports_with_fsdp2(tiny_model, tmp_path):  # noqa: F811
    write_dataset(generate_dataset(train_size=8, val_size=4, seed=5, few_shot=1), tmp_path / "data")
    overrides = [
        *fsdp2_overrides(),
        f"data.train_data=[{tmp_path / 'data' / 'train.parquet'}]",
        f"data.val_data=[{tmp_path / 'data' / 'validation.parquet'}]",
        f"trainer.policy.model.path={tiny_model}",
        *(o for o in TINY_RUN_OVERRIDES if not o.startswith("trainer.bf16=")),  # bf16 as trainer.bf16 unset decides
        "trainer.policy.model.lora.rank=8",
        "trainer.policy.model.lora.alpha=16",
        "trainer.policy.optimizer_config.lr=1e-2",
        "trainer.algorithm.use_kl_loss=true",
        # The tiny model earns no reward (zero advantages): the entropy term is what moves the adapter from its zero B.
        "trainer.algorithm.use_entropy_loss=true",
        "trainer.algorithm.entropy_loss_coef=0.1",
        "trainer.eval_interval=2",
        "trainer.ckpt_interval=1",
        "trainer.logger=jsonl",
        f"trainer.ckpt_path={tmp_path / 'ckpts'}",
        f"trainer.export_path={tmp_path / 'exports'}",
    ]
    command = [sys.executable, "-m", "skyrl_train.entrypoints.main_base", *overrides]
    run = subprocess.run(command, env=subprocess_env(), capture_output=True, text=True, timeout=800)
    assert run.returncode == 0, run.stderr[-4000:]
    on_gpu = machine_gpus() > 0
    assert f"run on {'cuda:0' if on_gpu else 'cpu'} (trainer.device=auto)" in run.stderr

    steps = [json.loads(line) for line in (tmp_path / "exports" / "metrics.jsonl").read_text().splitlines()]
    trained = [s for s in steps if "policy/policy_loss" in s]
    assert [s["step"] for s in trained] == [1, 2]
    assert all(s["policy/skipped_steps"] == 0 for s in trained)
    assert any("eval/all/pass_at_1" in s for s in steps if s["step"] == 2)
    assert (tmp_path / "ckpts" / "latest_ckpt_global_step.txt").read_text().strip() == "2"

    exported = export_checkpoint(tmp_path / "ckpts" / "global_step_2", tmp_path / "from_checkpoint")
    from_checkpoint = load_file(str(exported / "model.safetensors"))
    by_run = load_file(str(tmp_path / "exports" / "global_step_2" / "policy" / "model.safetensors"))
    base = load_file(f"{tiny_model}/model.safetensors")
    assert from_checkpoint.keys() == by_run.keys() == base.keys()
    # The run exports in its training dtype (bf16 on a GPU), export_hf in fp32 unless trainer.bf16=true was set.
    tolerance = {"atol": 1e-2, "rtol": 1e-2} if on_gpu else {"atol": 0.0, "rtol": 0.0}
    for name, weight in from_checkpoint.items():
        torch.testing.assert_close(weight, by_run[name].to(weight.dtype), **tolerance)
    changed = [name for name in base if not torch.equal(from_checkpoint[name], base[name])]
    assert changed, "the merged LoRA adapter changed no weight: nothing was trained"
