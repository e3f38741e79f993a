"""Asynchronous training (`trainer.fully_async.max_staleness_steps=1`) against a real `python -m skyrl_train.serve`
process with the tiny fp32 model: the first step trains as the synchronous loop does, the next one on rows one weight
version old, corrected by token TIS; a run killed with SIGKILL mid-update resumes without losing a prompt or training
one twice, and the synchronous loop refuses its checkpoint.

Settings: gsm8k, 2 prompts x 2 samples a step (4 prompts, 2 steps), full fine-tuning with lr 1e-3, weights sent to
the server by a gloo broadcast after every update.
"""

from __future__ import annotations

import asyncio
import copy
import json
import signal
import subprocess
import sys
import textwrap
import threading
from collections import Counter

import pytest
import torch

from skyrl_gym.envs.gsm8k.synthetic_data import generate_dataset, write_dataset
from skyrl_train.checkpoints import LATEST_CKPT_FILE
from skyrl_train.config import load_config
from skyrl_train.entrypoints.main_base import BasePPOExp
from skyrl_train.testing import TEST_CONTROL_TOKEN, TINY_RUN_OVERRIDES, tiny_model  # noqa: F401
from skyrl_train.testing.ray import subprocess_env
from skyrl_train.testing.serve_process import start_server
from skyrl_train.training_batch import TrainingInputBatch

SERVED_NAME = "async-policy"
REWARDS = [1.0, 0.0]
"""Every group's rewards: both trajectories of a group differ, so GRPO has a signal (the random model never solves
gsm8k)."""


@pytest.fixture
def server(tiny_model):  # noqa: F811
    process, url = start_server(tiny_model, SERVED_NAME)
    yield url
    process.kill()
    process.wait(30)


def remote_overrides(url: str, data_dir, run_dir, tiny_model: str) -> list[str]:  # noqa: F811
    return [
        f"data.train_data=[{data_dir / 'train.parquet'}]",
        "data.val_data=[]",
        f"trainer.policy.model.path={tiny_model}",
        *TINY_RUN_OVERRIDES,
        "trainer.max_prompt_length=1024",
        "trainer.algorithm.use_kl_loss=false",
        "trainer.eval_interval=-1",
        "trainer.logger=jsonl",
        "trainer.dump_data_batch=true",
        f"trainer.ckpt_path={run_dir / 'ckpts'}",
        f"trainer.export_path={run_dir / 'exports'}",
        "generator.run_engines_locally=false",
        f"generator.remote_inference_engine_urls=[{url}]",
        f"generator.model_name={SERVED_NAME}",
        f"generator.remote_inference_engine_control_token={TEST_CONTROL_TOKEN}",
        "generator.weight_sync_backend=gloo",
    ]


def groups_of(uids: list[str], output: dict) -> dict[str, dict]:
    """A generator output cut into one output per prompt (`uids`: the prompt of each row)."""
    rows = len(uids)
    groups = {}
    for uid in dict.fromkeys(uids):
        picked = [i for i, row_uid in enumerate(uids) if row_uid == uid]
        groups[uid] = {
            key: [value[i] for i in picked] if isinstance(value, list) and len(value) == rows else copy.deepcopy(value)
            for key, value in output.items()
        }
    return groups


class RecordedRun(BasePPOExp):
    """The real run; every group's rewards are `REWARDS`. Without `recorded` it records each generated group by prompt
    uid (and which prompts its first step drew); with it, the recorded groups are replayed instead of generated. It
    keeps the policy's weights after the first update and, with `hold_first_update`, holds that update (in its
    thread) until the groups of the next step have been generated."""

    def __init__(self, cfg, recorded: dict[str, dict] | None = None, hold_first_update: bool = False):
        super().__init__(cfg)
        self.recorded = recorded if recorded is not None else {}
        self.replay = recorded is not None
        self.first_step_prompts: list[str] | None = None
        self.hold_first_update = hold_first_update
        self.generated_groups = 0
        self.next_step_generated = threading.Event()
        self.generating = 0
        self.most_generating = 0
        self.weights_after_first_update: dict[str, torch.Tensor] | None = None

    def get_generator(self, cfg, tokenizer, engine):
        generator = super().get_generator(cfg, tokenizer, engine)
        generate = generator.generate

        async def recorded_or_generated(generator_input):
            uids = [trajectory.instance_id for trajectory in generator_input["trajectory_ids"]]
            if self.replay and uids[0] in self.recorded:  # asynchronous: one prompt's group per call
                output = copy.deepcopy(self.recorded[uids[0]])
            else:
                self.generating += 1
                self.most_generating = max(self.most_generating, self.generating)
                try:
                    output = await generate(generator_input)
                finally:
                    self.generating -= 1
                output["rewards"] = REWARDS * (len(uids) // len(REWARDS))
                if not self.replay:
                    self.recorded.update(groups_of(uids, output))
                    self.first_step_prompts = self.first_step_prompts or list(dict.fromkeys(uids))
            self.generated_groups += len(set(uids))
            if self.generated_groups >= 2 * self.cfg.trainer.train_batch_size:
                self.next_step_generated.set()
            return output

        generator.generate = recorded_or_generated
        return generator

    def get_workers(self, num_training_steps):
        policy, ref, critic = super().get_workers(num_training_steps)
        ppo_train = policy.ppo_train

        def train(*args, **kwargs):
            first = self.weights_after_first_update is None
            if first and self.hold_first_update:  # in the update's thread; the event loop goes on generating
                assert self.next_step_generated.wait(120), "the next step's groups were not generated"
            metrics = ppo_train(*args, **kwargs)
            if first:
                self.weights_after_first_update = {
                    name: p.detach().clone() for name, p in policy.model.named_parameters() if p.requires_grad
                }
            return metrics

        policy.ppo_train = train
        return policy, ref, critic


def step_metrics(run_dir) -> dict[int, dict]:
    rows = [json.loads(line) for line in (run_dir / "exports" / "metrics.jsonl").read_text().splitlines()]
    return {row["trainer/global_step"]: row for row in rows if "policy/policy_loss" in row}


def test_k1_trains_the_first_step_as_the_synchronous_loop_then_corrects_stale_rows(
    tmp_path, server, tiny_model  # noqa: F811
):
    write_dataset(generate_dataset(train_size=4, val_size=0, seed=3, few_shot=0), tmp_path / "data")
    batches = ["trainer.train_batch_size=2", "trainer.policy_mini_batch_size=2", "trainer.ckpt_interval=-1"]
    common = [
        *remote_overrides(server, tmp_path / "data", tmp_path / "sync", tiny_model),
        *batches,
        "generator.n_samples_per_prompt=2",
        "generator.sampling_params.max_generate_length=8",
        "trainer.policy.optimizer_config.lr=1e-3",
    ]
    synchronous = RecordedRun(load_config(common))
    synchronous.run()

    asynchronous_cfg = load_config(
        [
            *common,
            f"trainer.export_path={tmp_path / 'async' / 'exports'}",
            "trainer.fully_async.max_staleness_steps=1",
            "trainer.fully_async.num_parallel_generation_workers=1",
        ]
    )
    assert len(synchronous.first_step_prompts) == 2
    asynchronous = RecordedRun(
        asynchronous_cfg,
        recorded={uid: synchronous.recorded[uid] for uid in synchronous.first_step_prompts},
        hold_first_update=True,
    )
    asynchronous.run()

    # One worker: one group generating at a time, though the budget lets (k + 1) x 2 = 4 run.
    assert asynchronous.most_generating == 1
    sync_steps, async_steps = step_metrics(tmp_path / "sync"), step_metrics(tmp_path / "async")
    first, second = async_steps[1], async_steps[2]

    # Step 1: the synchronous run's rollouts, generated with the weights it trains (version 0): no staleness, the
    # correction is the identity (the server's fp32 logprobs are the trainer's), and the update is the same.
    assert (first["async/staleness_mean"], first["async/staleness_max"]) == (0.0, 0)
    assert first["policy/loss_metrics/is_ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    assert first["policy/policy_loss"] == pytest.approx(sync_steps[1]["policy/policy_loss"], rel=1e-3, abs=1e-6)
    for name, weight in synchronous.weights_after_first_update.items():
        expected = asynchronous.weights_after_first_update[name]
        assert float((weight - expected).norm() / expected.norm()) < 1e-4, name

    # Step 2: generated with version 0 while step 1 trained, trained on version 1: one version stale, and the
    # correction's ratios show the change of the weights.
    assert (second["generate/min_weight_version"], second["generate/max_weight_version"]) == (0, 0)
    assert (second["async/staleness_mean"], second["async/staleness_max"]) == (1.0, 1)
    assert second["async/stale_groups_dropped"] == 0
    spread = second["policy/loss_metrics/is_ratio_max"] - second["policy/loss_metrics/is_ratio_min"]
    assert spread > 1e-3
    assert "policy/loss_metrics/is_ratio_mean" not in sync_steps[1]  # the synchronous run has no correction
    assert 0.0 <= second["async/generation_idle_share"] <= 1.0
    assert second["timing/wait_for_rollouts"] >= 0.0


class LateGroup(BasePPOExp):
    """The real run; the second prompt's group, once generated, is held back until the second update has begun."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.updates = 0
        self.groups = 0
        self.held_prompt: str | None = None

    def get_generator(self, cfg, tokenizer, engine):
        generator = super().get_generator(cfg, tokenizer, engine)
        generate = generator.generate

        async def generate_and_hold(generator_input):
            output = await generate(generator_input)
            output["rewards"] = REWARDS * (len(output["rewards"]) // len(REWARDS))
            self.groups += 1
            if self.groups == 2:
                self.held_prompt = generator_input["trajectory_ids"][0].instance_id
                while self.updates < 2:
                    await asyncio.sleep(0.05)
            return output

        generator.generate = generate_and_hold
        return generator

    def get_workers(self, num_training_steps):
        policy, ref, critic = super().get_workers(num_training_steps)
        ppo_train = policy.ppo_train

        def train(*args, **kwargs):
            self.updates += 1
            return ppo_train(*args, **kwargs)

        policy.ppo_train = train
        return policy, ref, critic


def test_a_group_older_than_k_is_dropped_and_its_prompt_trained_once_fresh(tmp_path, server, tiny_model):  # noqa: F811
    write_dataset(generate_dataset(train_size=6, val_size=0, seed=3, few_shot=0), tmp_path / "data")
    run = LateGroup(
        load_config(
            [
                *remote_overrides(server, tmp_path / "data", tmp_path / "run", tiny_model),
                "trainer.train_batch_size=2",
                "trainer.policy_mini_batch_size=2",
                "trainer.ckpt_interval=-1",
                "trainer.fully_async.max_staleness_steps=1",
            ]
        )
    )
    run.run()

    steps = step_metrics(tmp_path / "run")
    # Generated with version 0 and queued during step 2, the held group is 2 versions old at step 3: dropped there,
    # and its prompt generated again with version 2 and trained in that step.
    assert [steps[step]["async/stale_groups_dropped"] for step in (1, 2, 3)] == [0, 0, 1]
    assert max(steps[step]["async/staleness_max"] for step in (1, 2, 3)) <= 1
    dumps = tmp_path / "run" / "exports" / "dumped_data"
    uids = {
        step: TrainingInputBatch.load(dumps / f"global_step_{step}_training_input.pkl").metadata["uids"]
        for step in (1, 2, 3)
    }
    assert run.held_prompt in uids[3] and run.held_prompt not in uids[1] + uids[2]
    trained = Counter(uid for step_uids in uids.values() for uid in step_uids)
    assert len(trained) == 6 and set(trained.values()) == {2}  # every prompt once, with its 2 samples
    assert steps[3]["generate/max_weight_version"] == 2


LAUNCHER = textwrap.dedent("""
    import os, signal, sys
    from skyrl_train.entrypoints import main_base
    from skyrl_train.workers import PolicyWorker

    nth = int(os.environ.get("KILL_AT_UPDATE") or 0)
    calls = {"train": 0}
    ppo_train = PolicyWorker.ppo_train

    def killing(self, *args, **kwargs):
        calls["train"] += 1
        if calls["train"] == nth:
            os.kill(os.getpid(), signal.SIGKILL)  # inside the update, with the next step's groups on their way
        return ppo_train(self, *args, **kwargs)

    PolicyWorker.ppo_train = killing
    sys.exit(main_base.main(sys.argv[1:]))
    """)
STEPS = 4


def test_a_killed_asynchronous_run_resumes_without_losing_or_repeating_a_prompt(
    tmp_path, server, tiny_model  # noqa: F811
):
    write_dataset(generate_dataset(train_size=4 * STEPS, val_size=0, seed=3, few_shot=0), tmp_path / "data")
    run = tmp_path / "run"
    overrides = [
        *remote_overrides(server, tmp_path / "data", run, tiny_model),
        "trainer.ckpt_interval=2",
        "trainer.resume_mode=latest",
        "trainer.fully_async.max_staleness_steps=1",
    ]

    def train(kill_at_update: int | None = None) -> subprocess.CompletedProcess:
        env = subprocess_env(KILL_AT_UPDATE=str(kill_at_update or ""))
        return subprocess.run(
            [sys.executable, "-c", LAUNCHER, *overrides], env=env, capture_output=True, text=True, timeout=600
        )

    killed = train(kill_at_update=3)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert (run / "ckpts" / LATEST_CKPT_FILE).read_text().strip() == "2"

    resumed = train()
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "global_step_2 at step 2" in resumed.stderr
    dumps = run / "exports" / "dumped_data"
    trained = Counter(
        uid
        for step in range(1, STEPS + 1)
        for uid in TrainingInputBatch.load(dumps / f"global_step_{step}_training_input.pkl").metadata["uids"]
    )
    # Steps 1-2 of the killed run and 3-4 of the resumed one: each of the 16 prompts exactly once (2 samples each).
    assert len(trained) == 4 * STEPS
    assert set(trained.values()) == {2}

    # The synchronous loop cannot tell which prompts of an open epoch an asynchronous checkpoint trained: refused.
    synchronous = subprocess.run(
        [sys.executable, "-m", "skyrl_train.entrypoints.main_base", *overrides[:-1], "trainer.epochs=2"],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert synchronous.returncode == 1, synchronous.stderr[-3000:]
    assert "written by asynchronous training (trainer.fully_async.max_staleness_steps > 0)" in synchronous.stderr
