"""Acceptance: the gsm8k example trains against two `python -m skyrl_train.serve` processes started here
(`generator.run_engines_locally=false`), and goes on when one of them is killed mid-step.

The settings are examples/gsm8k/run_gsm8k.sh's (LoRA GRPO, 4 prompts x 4 samples, single-turn, 64-token answers) with
the tiny model and 3 steps, and again with full fine-tuning. The servers return the sampled token ids and their
logprobs; the weights reach them after every update (the LoRA adapter by folder, or every weight by a gloo
broadcast), so each step's rollouts come from the weights of the step before: the servers report that version on
every sample, and the rollout logprobs equal the trainer's. At step 2 one server is killed
with SIGKILL while it serves a request: its episodes of that step become infrastructure failures (`engine_failed`),
step 3 runs on the other one (with full weights, over a weight-update group formed again without the dead server),
and the other one ends with the final weights.

    .venv/bin/pytest -m slow skyrl-train/tests/trainer/test_remote_engines_run.py   (about 1.5 min each on 2 cores)
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

import httpx
import pytest
import torch

from skyrl_gym.envs.gsm8k.synthetic_data import generate_dataset, write_dataset
from skyrl_train.config import load_config
from skyrl_train.entrypoints.main_base import BasePPOExp
from skyrl_train.generators.base import GeneratorInterface
from skyrl_train.generators.utils import encode_chat
from skyrl_train.inference_engines import SamplingParams
from skyrl_train.inference_engines.remote import RemoteInferenceEngine
from skyrl_train.testing import TEST_CONTROL_TOKEN, tiny_tokenizer  # noqa: F401
from skyrl_train.testing.ray import fsdp2_overrides, subprocess_env
from skyrl_train.testing.serve_process import start_server
from skyrl_train.tracking.metrics_file import read_metrics
from skyrl_train.training_batch import TrainingInputBatch

SERVED_NAME = "gsm8k-policy"
STEPS = 3
KILL_AT_STEP = 2


class KillDuringStep(BasePPOExp):
    """The real run; it only kills `victim` while that server works on its first request of step `KILL_AT_STEP`."""

    def __init__(self, cfg, victim: subprocess.Popen):
        super().__init__(cfg)
        self.victim = victim
        self.step = 0
        self.killed_during: int | None = None

    def get_workers(self, num_training_steps):
        self.policy, ref, critic = super().get_workers(num_training_steps)
        return self.policy, ref, critic

    def make_remote_engines(self, tokenizer):
        client = super().make_remote_engines(tokenizer)
        victim = client.engines[1]
        post = victim._post

        async def post_then_kill(route, body, **kwargs):
            if route == "/v1/completions" and self.step == KILL_AT_STEP and self.killed_during is None:
                self.killed_during = self.step
                request = asyncio.ensure_future(post(route, body, **kwargs))
                await asyncio.sleep(0.05)  # the request has reached the server
                self.victim.kill()
                return await request
            return await post(route, body, **kwargs)

        victim._post = post_then_kill
        return client

    def get_generator(self, cfg, tokenizer, engine):
        return _StepTracking(super().get_generator(cfg, tokenizer, engine), self)


class _StepTracking(GeneratorInterface):
    def __init__(self, generator, experiment: KillDuringStep):
        self.generator, self.experiment = generator, experiment

    async def generate(self, input_batch):
        self.experiment.step = input_batch["batch_metadata"].global_step
        return await self.generator.generate(input_batch)


@pytest.mark.slow
@pytest.mark.parametrize("lora_rank", [32, 0], ids=["lora", "full"])
def test_gsm8k_trains_on_two_remote_servers_and_goes_on_when_one_is_killed(
    tmp_path, tiny_model, tiny_tokenizer, lora_rank  # noqa: F811
):
    write_dataset(generate_dataset(4 * STEPS, 0, seed=0, max_ops=1, max_value=20, few_shot=1), tmp_path / "data")
    servers = [start_server(tiny_model, SERVED_NAME, lora_root=tmp_path) for _ in range(2)]
    (survivor, survivor_url), (victim, victim_url) = servers
    try:
        cfg = load_config(
            [
                # examples/gsm8k/grpo.yaml (with examples/cpu_lora_grpo.yaml), with the tiny model and no eval
                f"trainer.policy.model.path={tiny_model}",
                "trainer.bf16=false",
                "trainer.gradient_checkpointing=false",
                f"trainer.policy.model.lora.rank={lora_rank}",
                "trainer.policy.optimizer_config.lr=2e-4",
                "trainer.algorithm.advantage_estimator=grpo",
                "trainer.algorithm.use_kl_loss=false",
                "trainer.epochs=1",
                "trainer.train_batch_size=4",
                "trainer.policy_mini_batch_size=4",
                "trainer.micro_train_batch_size_per_gpu=8",
                "trainer.micro_forward_batch_size_per_gpu=16",
                "generator.n_samples_per_prompt=4",
                f"data.train_data=[{tmp_path / 'data' / 'train.parquet'}]",
                "data.val_data=[]",
                "trainer.eval_interval=-1",
                "trainer.max_prompt_length=384",
                "generator.max_turns=1",
                "generator.sampling_params.max_generate_length=64",
                "trainer.ckpt_interval=-1",
                "trainer.dump_data_batch=true",
                "trainer.logger=[jsonl]",
                f"trainer.export_path={tmp_path / 'exports'}",
                # remote engines: our two servers, weights synced each step
                "generator.run_engines_locally=false",
                "generator.num_inference_engines=2",
                f"generator.remote_inference_engine_urls=[{survivor_url},{victim_url}]",
                f"generator.model_name={SERVED_NAME}",
                f"generator.remote_inference_engine_control_token={TEST_CONTROL_TOKEN}",
                "generator.weight_sync_backend=gloo",
                # half the episodes of the step that loses a server may fail (the default stops above 0.5)
                "trainer.max_infra_failure_ratio=0.75",
            ]
            + (
                [
                    f"trainer.policy.model.lora.lora_sync_path={tmp_path / 'lora_sync'}",
                    "trainer.policy.model.lora.alpha=64",
                ]
                if lora_rank
                else []
            )
        )
        experiment = KillDuringStep(cfg, victim)
        experiment.run()

        assert experiment.killed_during == KILL_AT_STEP and victim.wait(10) == -9
        history = read_metrics(tmp_path / "exports" / "metrics.jsonl").steps
        assert sorted(history) == [1, 2, 3]
        failures = [history[step]["generate/engine_failures"] for step in (1, 2, 3)]
        assert failures[0] == 0 and failures[1] >= 1 and failures[2] == 0
        assert history[2]["generate/stop_reason/engine_failed"] == failures[1]
        for step in (1, 2, 3):
            # each step generated with the weights of the step before (version = that step), as the servers report
            assert history[step]["generate/min_weight_version"] == history[step]["generate/max_weight_version"]
            assert history[step]["generate/max_weight_version"] == step - 1
            # token ids in and out, logprobs of the synced weights: the trainer recomputes the servers' logprobs
            assert history[step]["policy/rollout_train_logprobs_abs_diff_mean"] < 1e-4
            assert history[step]["generate/retokenized_turns"] == 0
        step_3 = TrainingInputBatch.load(tmp_path / "exports" / "dumped_data" / "global_step_3_training_input.pkl")
        assert step_3.batch_size == 16

        # The survivor ends with the final weights: version 3, the trainer's logprobs.
        assert httpx.get(survivor_url + "/health").json() == {"status": "ok", "weight_version": STEPS}
        check = SamplingParams(temperature=0.0, max_generate_length=8, logprobs=0)
        prompt = encode_chat(tiny_tokenizer, [{"role": "user", "content": "What is 3+4?"}], add_generation_prompt=True)
        output = asyncio.run(_generate(survivor_url, tiny_tokenizer, prompt, check))
        ids = torch.tensor([prompt + output["response_ids"][0]])
        response = len(output["response_ids"][0])
        batch = TrainingInputBatch(
            {
                "sequences": ids,
                "attention_mask": torch.ones_like(ids),
                "response_mask": torch.ones((1, response), dtype=torch.long),
            }
        )
        trainer_logprobs = experiment.policy.compute_logprobs(batch, micro_batch_size=1)[0]
        torch.testing.assert_close(torch.tensor(output["response_logprobs"][0]), trainer_logprobs, rtol=0, atol=1e-4)
        assert output["weight_versions"] == [STEPS]
    finally:
        for process, _ in servers:
            process.kill()
            process.wait(30)


async def _generate(url, tokenizer, prompt, params):
    engine = RemoteInferenceEngine(url, SERVED_NAME, tokenizer)
    try:
        return await engine.generate({"prompt_token_ids": [prompt], "sampling_params": params})
    finally:
        await engine.teardown()


@pytest.mark.slow
@pytest.mark.parametrize("lora_rank", [4, 0], ids=["lora", "full"])
def test_fsdp2_ranks_send_their_weights_to_a_remote_server(tmp_path, tiny_model, lora_rank):
    """With `trainer.strategy=fsdp2` the weights are gathered from the 2 ranks (Ray actors) to the driver, which sends
    them to the server: the server's version and logprobs follow the trainer's (about 2 min each)."""
    write_dataset(generate_dataset(4 * 2, 0, seed=0, max_ops=1, max_value=20, few_shot=1), tmp_path / "data")
    server, url = start_server(tiny_model, SERVED_NAME, lora_root=tmp_path)
    try:
        # No reference model here (no KL term), so its placement key would be refused.
        fsdp2 = [o for o in fsdp2_overrides() if not o.startswith("trainer.placement.ref_")]
        overrides = (
            fsdp2
            + [
                f"trainer.policy.model.path={tiny_model}",
                "trainer.bf16=false",
                "trainer.gradient_checkpointing=false",
                f"trainer.policy.model.lora.rank={lora_rank}",
                "trainer.algorithm.use_kl_loss=false",
                "trainer.train_batch_size=4",
                "trainer.policy_mini_batch_size=4",
                "trainer.micro_train_batch_size_per_gpu=4",
                "trainer.micro_forward_batch_size_per_gpu=8",
                "generator.n_samples_per_prompt=2",
                f"data.train_data=[{tmp_path / 'data' / 'train.parquet'}]",
                "data.val_data=[]",
                "trainer.eval_interval=-1",
                "trainer.max_prompt_length=384",
                "generator.sampling_params.max_generate_length=16",
                "trainer.ckpt_interval=-1",
                "trainer.logger=[jsonl]",
                f"trainer.export_path={tmp_path / 'exports'}",
                "generator.run_engines_locally=false",
                f"generator.remote_inference_engine_urls=[{url}]",
                f"generator.model_name={SERVED_NAME}",
                f"generator.remote_inference_engine_control_token={TEST_CONTROL_TOKEN}",
                "generator.weight_sync_backend=gloo",
            ]
            + ([f"trainer.policy.model.lora.lora_sync_path={tmp_path / 'lora_sync'}"] if lora_rank else [])
        )
        run = subprocess.run(
            [sys.executable, "-m", "skyrl_train.entrypoints.main_base", *overrides],
            env=subprocess_env(),
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        history = read_metrics(tmp_path / "exports" / "metrics.jsonl").steps
        assert [history[step]["generate/max_weight_version"] for step in (1, 2)] == [0, 1]
        for step in (1, 2):
            assert history[step]["policy/rollout_train_logprobs_abs_diff_mean"] < 1e-4
        assert httpx.get(url + "/health").json() == {"status": "ok", "weight_version": 2}
    finally:
        server.kill()
        server.wait(30)
