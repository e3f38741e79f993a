"""Every logged step carries the training process's resident memory: its peak during the step and its size after."""

import json

from skyrl_gym.envs.gsm8k.synthetic_data import generate_dataset, write_dataset
from skyrl_train.config import load_config
from skyrl_train.entrypoints.main_base import BasePPOExp
from skyrl_train.testing import TINY_RUN_OVERRIDES


def test_each_training_step_logs_its_peak_and_current_rss(tmp_path, tiny_model):
    write_dataset(generate_dataset(train_size=4, val_size=2, seed=3, few_shot=0), tmp_path / "data")
    exports = tmp_path / "exports"
    cfg = load_config(
        [
            f"data.train_data=[{tmp_path / 'data' / 'train.parquet'}]",
            f"data.val_data=[{tmp_path / 'data' / 'validation.parquet'}]",
            "environment.env_class=gsm8k",
            f"trainer.policy.model.path={tiny_model}",
            *TINY_RUN_OVERRIDES,
            "trainer.train_batch_size=2",  # 4 prompts: two steps
            "trainer.policy_mini_batch_size=2",
            "generator.eval_sampling_params.max_generate_length=4",
            "trainer.algorithm.use_kl_loss=false",
            "trainer.eval_interval=-1",
            "trainer.ckpt_interval=-1",
            "trainer.logger=jsonl",
            f"trainer.ckpt_path={tmp_path / 'ckpts'}",
            f"trainer.export_path={exports}",
        ]
    )
    BasePPOExp(cfg).run()
    steps = [json.loads(line) for line in (exports / "metrics.jsonl").read_text().splitlines()]
    train = [s for s in steps if "trainer/global_step" in s]
    assert [s["trainer/global_step"] for s in train] == [1, 2]
    for step in train:
        # GB, not bytes or kB: a tiny model's run stays far below 8 GB and far above 50 MB
        assert 0.05 < step["memory/rss_gb"] <= step["memory/peak_rss_gb"] < 8
