"""This fork's ports of upstream skyrl-train's example mains (`examples/`, written here in upstream's form) run as
upstream's scripts run: `python -m examples.<name>.main_<name> key=value +key=value ...` in a subprocess, from a folder
holding `examples/` (a copy in the test's temporary folder: hydra writes its `outputs/` into the working directory),
through hydra, `validate_cfg`, `initialize_ray` (a local Ray cluster, token auth off as in every test) and a Ray task
that runs `BasePPOExp`. Each trains the tiny model on CPU for two steps (2 prompts x 2 samples, 4 new tokens) and the
test reads the custom piece's effect in `metrics.jsonl`.

Each run starts Ray and a task process that loads torch and the model: tens of seconds, so they are `slow`;
`test_upstream_api.py` checks the pieces in the default suite.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from skyrl_gym.envs.gsm8k.synthetic_data import generate_dataset, write_dataset
from skyrl_train.testing import TINY_RUN_OVERRIDES, tiny_model  # noqa: F401
from skyrl_train.testing.ray import subprocess_env

pytestmark = pytest.mark.slow

PORTS = Path(__file__).parent / "examples"
STEPS = [1, 2]


@pytest.fixture
def run_port(tmp_path, tiny_model):  # noqa: F811
    """``run_port(module, *overrides, data=None) -> metric rows of the training steps``: the port run as a script on
    4 prompts (gsm8k's, or the jsonl file `data`), 2 a step."""
    shutil.copytree(PORTS, tmp_path / "examples")
    write_dataset(generate_dataset(train_size=4, val_size=0, seed=5, few_shot=0), tmp_path / "gsm8k")

    def run(module: str, *overrides: str, data: Path | None = None) -> list[dict]:
        out = tmp_path / "run"
        command = [
            sys.executable,
            "-m",
            module,
            f"data.train_data=[{data or tmp_path / 'gsm8k' / 'train.parquet'}]",
            "data.val_data=[]",
            f"trainer.policy.model.path={tiny_model}",
            *TINY_RUN_OVERRIDES,
            "trainer.train_batch_size=2",
            "trainer.policy_mini_batch_size=2",
            "trainer.algorithm.use_kl_loss=false",
            "trainer.eval_interval=-1",
            "trainer.ckpt_interval=-1",
            "trainer.resume_mode=none",
            "trainer.logger=[jsonl]",
            f"trainer.ckpt_path={out / 'ckpts'}",
            f"trainer.export_path={out / 'exports'}",
            *overrides,
        ]
        result = subprocess.run(
            command, cwd=tmp_path, env=subprocess_env(), capture_output=True, text=True, timeout=600
        )
        assert result.returncode == 0, f"{' '.join(command)}\n{result.stderr[-6000:]}"
        lines = (out / "exports" / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
        rows = [row for row in map(json.loads, lines) if "trainer/global_step" in row]
        assert [row["trainer/global_step"] for row in rows] == STEPS
        return rows

    return run


def test_custom_env_registered_in_the_task(run_port, tmp_path):
    rows = [
        {
            "prompt": [{"role": "user", "content": f"What is {a} * {b}? Put the answer in \\boxed{{}}."}],
            "env_class": "multiply",
            "reward_spec": {"method": "rule", "ground_truth": a * b},
        }
        for a, b in [(3, 4), (6, 7), (2, 9), (5, 5)]
    ]
    data = tmp_path / "multiply.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    metrics = run_port("examples.multiply.main_multiply", "environment.env_class=multiply", data=data)
    assert [row["environment/multiply/turns"] for row in metrics] == [1.0, 1.0]  # MultiplyEnv.get_metrics


def test_custom_advantage_estimator_registered_in_the_driver(run_port):
    metrics = run_port(
        "examples.custom_advantage_estimator.main_custom_adv_est",
        "trainer.algorithm.advantage_estimator=fixed_baseline",
        "+trainer.algorithm.baseline=-0.5",
    )
    # The random tiny model never solves gsm8k: reward 0, so every sampled token's advantage is 0 - (-0.5).
    assert [row["reward/avg_raw_reward"] for row in metrics] == [0.0, 0.0]
    assert [row["loss/avg_raw_advantages"] for row in metrics] == [0.5, 0.5]


def test_custom_policy_loss_in_upstream_03s_form(run_port):
    metrics = run_port(
        "examples.custom_policy_loss.main_custom_policy_loss", "trainer.algorithm.policy_loss_type=reinforce"
    )
    for row in metrics:  # the loss's own metric, its clip ratio, and none of the built-in loss's
        assert {k: v for k, v in row.items() if k.startswith("policy/loss_metrics/")} == {
            "policy/loss_metrics/clip_ratio": 0.0
        }


def test_dapo_trainer_reads_its_added_keys(run_port):
    metrics = run_port(
        "examples.dapo.main_dapo",
        "generator.batched=true",
        "+trainer.algorithm.overlong_buffer.len=2",
        "+trainer.algorithm.overlong_buffer.penalty_factor=0.5",
        "+generator.sampling_params.ignore_eos=true",
    )
    # Every response has max_generate_length=4 tokens, 2 into the 2-token buffer: 0 - 2 / 2 * 0.5.
    assert [row["reward/avg_raw_reward"] for row in metrics] == [-0.5, -0.5]


def test_get_generator_override_with_upstreams_arguments(run_port):
    metrics = run_port("examples.custom_generator.main_custom_generator", "+generator.run_tag=7")
    assert [row["counting_generator/batches"] for row in metrics] == [1, 2]
    assert [row["counting_generator/run_tag"] for row in metrics] == [7.0, 7.0]
