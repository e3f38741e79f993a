"""A local engine and the trainer take turns in upstream SkyRL's order: the engine sleeps through the trainer's turn, a
weight sync wakes the weights alone and sends them with the KV cache still asleep (at vLLM sleep level 2 a sleeping
engine's weights are released), and the KV cache wakes only when a generation starts.

The runs are real (`BasePPOExp`: tiny model, gsm8k env, policy updates, checkpoints) except the engine: a fake that
records its sleeps, wake-ups, weight updates and generations, and answers each prompt with the same response.
"""

from __future__ import annotations

import json

import pytest

from skyrl_gym.envs.gsm8k.synthetic_data import generate_dataset, write_dataset
from skyrl_train.config import load_config
from skyrl_train.entrypoints import main_base
from skyrl_train.entrypoints.main_base import BasePPOExp
from skyrl_train.inference_engines.base import InferenceEngineInput, InferenceEngineInterface, InferenceEngineOutput
from skyrl_train.testing import TINY_RUN_OVERRIDES
from skyrl_train.tracking.backends.jsonl import METRICS_FILE
from skyrl_train.tracking.metrics_file import read_metrics
from skyrl_train.trainer import EngineTurns, PPOTrainer
from skyrl_train.weight_sync import WeightUpdateRequest


class RecordingEngine(InferenceEngineInterface):
    """Records `sleep`, `wake_up(tags)`, `update_named_weights(version)` and generation (one entry per run of
    consecutive calls: `generate(eval)` for greedy sampling, else `generate(train)`) into `events`."""

    def __init__(self, tokenizer, events: list[str]):
        self.tokenizer = tokenizer
        self.events = events
        self.version = 0

    async def sleep(self) -> None:
        self.events.append("sleep")

    async def wake_up(self, tags: list[str] | None = None) -> None:
        self.events.append(f"wake_up({tags})")

    async def update_named_weights(self, request: WeightUpdateRequest) -> None:
        self.version = request.weight_version
        self.events.append(f"update_named_weights(version {request.weight_version})")

    async def generate(self, input_batch: InferenceEngineInput) -> InferenceEngineOutput:
        event = "generate(eval)" if input_batch["sampling_params"].greedy else "generate(train)"
        if self.events[-1] != event:
            self.events.append(event)
        ids = self.tokenizer.encode("#### 4", add_special_tokens=False) + [self.tokenizer.eos_token_id]
        count = len(input_batch["prompt_token_ids"])
        return InferenceEngineOutput(
            responses=["#### 4"] * count,
            response_ids=[list(ids)] * count,
            stop_reasons=["stop"] * count,
            response_logprobs=[[-1.0] * len(ids)] * count,
            weight_versions=[self.version] * count,
        )


def run(tmp_path, tiny_model, run_name: str, *overrides: str) -> list[str]:
    """Two steps of 2 gsm8k prompts x 2 samples, an eval before training and after step 2, a checkpoint after every
    step; returns the engine's events, with the policy's updates and checkpoint saves and loads among them."""
    data = tmp_path / "data"
    if not data.exists():
        write_dataset(generate_dataset(train_size=4, val_size=2, seed=3, few_shot=0), data)
    cfg = load_config(
        [
            f"data.train_data=[{data / 'train.parquet'}]",
            f"data.val_data=[{data / 'validation.parquet'}]",
            f"trainer.policy.model.path={tiny_model}",
            *TINY_RUN_OVERRIDES,
            "trainer.train_batch_size=2",
            "trainer.policy_mini_batch_size=2",
            "trainer.max_prompt_length=1024",
            "trainer.algorithm.use_kl_loss=false",
            "trainer.eval_interval=2",
            "trainer.eval_before_train=true",
            "trainer.ckpt_interval=1",
            "trainer.hf_save_interval=-1",
            "trainer.logger=jsonl",
            f"trainer.ckpt_path={tmp_path / run_name / 'ckpts'}",
            f"trainer.export_path={tmp_path / run_name / 'exports'}",
            *overrides,
        ]
    )
    events: list[str] = []

    class Experiment(BasePPOExp):
        def get_inference_engine(self, policy, tokenizer):
            return RecordingEngine(tokenizer, events)

        def get_workers(self, num_training_steps):
            policy, ref, critic = super().get_workers(num_training_steps)
            for method in ("ppo_train", "save_checkpoint", "load_checkpoint"):
                setattr(policy, method, _recorded(getattr(policy, method), method, events))
            return policy, ref, critic

    Experiment(cfg).run()
    return events


def _recorded(method, name: str, events: list[str]):
    def call(*args, **kwargs):
        events.append(name)
        return method(*args, **kwargs)

    return call


WAKE_WEIGHTS, WAKE_KV_CACHE = "wake_up(['weights'])", "wake_up(['kv_cache'])"


def test_every_sync_wakes_the_weights_first_and_the_kv_cache_wakes_for_the_next_generation(tmp_path, tiny_model):
    assert run(tmp_path, tiny_model, "two_steps") == [
        "sleep",
        WAKE_WEIGHTS,
        "update_named_weights(version 0)",
        WAKE_KV_CACHE,
        "generate(eval)",  # eval before training
        "generate(train)",  # step 1
        "sleep",
        "ppo_train",
        "save_checkpoint",
        WAKE_WEIGHTS,
        "update_named_weights(version 1)",
        WAKE_KV_CACHE,
        "generate(train)",  # step 2
        "sleep",
        "ppo_train",
        "save_checkpoint",
        WAKE_WEIGHTS,
        "update_named_weights(version 2)",
        WAKE_KV_CACHE,
        "generate(eval)",  # eval after the last step
        "sleep",  # the final HF export is the trainer's turn
    ]


def test_a_resumed_run_loads_the_checkpoint_asleep_then_syncs_its_weights_before_generating(tmp_path, tiny_model):
    run(tmp_path, tiny_model, "first")
    resumed = run(
        tmp_path,
        tiny_model,
        "resumed",
        "trainer.resume_mode=from_path",
        f"trainer.resume_path={tmp_path / 'first' / 'ckpts' / 'global_step_1'}",
    )
    assert resumed[:7] == [
        "sleep",
        "load_checkpoint",
        WAKE_WEIGHTS,
        "update_named_weights(version 1)",
        WAKE_KV_CACHE,
        "generate(eval)",  # eval before training, at step 1
        "generate(train)",  # step 2
    ]


class StateEngine(InferenceEngineInterface):
    async def generate(self, input_batch: InferenceEngineInput) -> InferenceEngineOutput:
        raise AssertionError("not called")


async def test_generating_after_a_sleep_without_a_weight_sync_is_refused():
    turns = EngineTurns(StateEngine())
    await turns.to_trainer()
    with pytest.raises(RuntimeError, match="asleep: sync the weights before generating"):
        await turns.to_generation()


def test_an_engine_the_trainer_does_not_hold_only_receives_the_syncs(tmp_path, tiny_model, monkeypatch):
    """Remote engines: `BasePPOExp` gives the trainer no engine, so nothing sleeps or wakes."""

    def trainer_without_engine(*args, **kwargs):
        return PPOTrainer(*args, **{**kwargs, "inference_engine": None})

    monkeypatch.setattr(main_base, "PPOTrainer", trainer_without_engine)
    assert run(tmp_path, tiny_model, "remote") == [
        "update_named_weights(version 0)",
        "generate(eval)",
        "generate(train)",
        "ppo_train",
        "save_checkpoint",
        "update_named_weights(version 1)",
        "generate(train)",
        "ppo_train",
        "save_checkpoint",
        "update_named_weights(version 2)",
        "generate(eval)",
    ]


def test_a_run_stopped_after_a_commit_logs_that_steps_metrics_and_due_eval_when_it_resumes(tmp_path, tiny_model):
    """A kill after step 2's checkpoint is committed but before its metrics and eval are logged: the step is not
    trained again (it is committed), so the resumed run logs what the checkpoint kept and runs the due eval."""
    run(tmp_path, tiny_model, "stopped", "trainer.eval_before_train=false")
    metrics_file = tmp_path / "stopped" / "exports" / METRICS_FILE
    kept = [line for line in metrics_file.read_text().splitlines() if json.loads(line)["step"] != 2]
    metrics_file.write_text("".join(line + "\n" for line in kept))  # what a kill right after the commit leaves

    resumed = run(tmp_path, tiny_model, "stopped", "trainer.eval_before_train=false")

    assert resumed[:6] == [
        "sleep",
        "load_checkpoint",
        WAKE_WEIGHTS,
        "update_named_weights(version 2)",
        WAKE_KV_CACHE,
        "generate(eval)",  # step 2's eval, due at the last step
    ]
    assert "ppo_train" not in resumed
    step_2 = read_metrics(metrics_file).steps[2]
    assert step_2["trainer/global_step"] == 2.0
    assert "policy/final_loss" in step_2
    assert any(key.startswith("eval/") for key in step_2)
