"""The trainer hands the colocated `hf` engine and the policy update turns: the engine sleeps through every update, so
no prefix KV computed with old weights survives into the next generation; each weight sync wakes its weights, and its
KV cache wakes for the generations after it (the order itself is `test_engine_turns.py`'s); the trainer's thread hands
back its OpenMP workers before each generation phase (the engine's thread computes then)."""

from __future__ import annotations

import threading

import skyrl_train.trainer
from skyrl_gym.envs.gsm8k.synthetic_data import generate_dataset, write_dataset
from skyrl_train.config import load_config
from skyrl_train.entrypoints.main_base import BasePPOExp


def test_the_engine_sleeps_through_every_policy_update_and_its_prefix_cache_is_empty_after(
    tmp_path, tiny_model, monkeypatch
):
    write_dataset(generate_dataset(train_size=4, val_size=2, seed=3, few_shot=2), tmp_path / "data")
    cfg = load_config(
        [
            f"data.train_data=[{tmp_path / 'data' / 'train.parquet'}]",
            f"data.val_data=[{tmp_path / 'data' / 'validation.parquet'}]",
            f"trainer.policy.model.path={tiny_model}",
            "trainer.train_batch_size=2",
            "trainer.policy_mini_batch_size=2",
            "trainer.micro_train_batch_size_per_gpu=4",
            "trainer.micro_forward_batch_size_per_gpu=4",
            "generator.n_samples_per_prompt=2",
            "generator.sampling_params.max_generate_length=4",
            "generator.eval_sampling_params.max_generate_length=4",
            "trainer.max_prompt_length=1024",
            "trainer.bf16=false",
            "trainer.gradient_checkpointing=false",
            "trainer.algorithm.use_kl_loss=false",
            "trainer.eval_interval=2",
            "trainer.eval_before_train=true",
            "trainer.ckpt_interval=-1",
            "trainer.hf_save_interval=-1",
            "trainer.logger=jsonl",
            f"trainer.ckpt_path={tmp_path / 'ckpts'}",
            f"trainer.export_path={tmp_path / 'exports'}",
        ]
    )
    events: list[str] = []
    release = skyrl_train.trainer.release_openmp_threads

    def recorded_release():
        released = release()
        events.append(f"release OpenMP threads ({threading.current_thread().name}: {released})")
        return released

    monkeypatch.setattr(skyrl_train.trainer, "release_openmp_threads", recorded_release)

    class Experiment(BasePPOExp):
        def get_inference_engine(self, policy, tokenizer):
            engine = self.engine = super().get_inference_engine(policy, tokenizer)
            sleep, wake_up, ppo_train = engine.sleep, engine.wake_up, policy.ppo_train

            async def recorded_sleep():
                await sleep()
                events.append(f"sleep(cached prefixes: {len(engine._batcher.prefix_cache)})")

            async def recorded_wake_up(tags=None):
                await wake_up(tags)
                events.append(f"wake_up({tags})")

            def recorded_ppo_train(*args, **kwargs):
                # A generate call now would be refused: the engine is asleep while the weights change.
                events.append("update (engine asleep)" if engine._asleep else "update (engine AWAKE)")
                return ppo_train(*args, **kwargs)

            engine.sleep, engine.wake_up, policy.ppo_train = recorded_sleep, recorded_wake_up, recorded_ppo_train
            return engine

    experiment = Experiment(cfg)
    experiment.run()
    release = "release OpenMP threads (MainThread: True)"
    sleep, wake_weights, wake_kv_cache = "sleep(cached prefixes: 0)", "wake_up(['weights'])", "wake_up(['kv_cache'])"
    assert events == [
        sleep,
        wake_weights,  # the first sync
        release,  # eval before training
        wake_kv_cache,
        release,  # step 1's rollouts
        sleep,
        "update (engine asleep)",
        wake_weights,
        release,  # step 2's rollouts
        wake_kv_cache,
        sleep,
        "update (engine asleep)",
        wake_weights,
        release,  # eval after step 2
        wake_kv_cache,
        sleep,  # the final export
    ]
    assert experiment.engine.stats.cached_prompt_tokens > 0  # the few-shot prefix was prefilled and reused
