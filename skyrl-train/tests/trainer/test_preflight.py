"""Preflight: env failures that would make every trajectory a placeholder stop the run before the model loads."""

from __future__ import annotations

import json

import pytest

from skyrl_gym.envs.gsm8k.synthetic_data import generate_dataset, write_dataset
from skyrl_train.config import load_config
from skyrl_train.entrypoints.main_base import BasePPOExp, main
from skyrl_train.preflight import PreflightError


class NoModelExperiment(BasePPOExp):
    """Records whether the run got as far as loading the model."""

    loaded_model = False

    def get_workers(self, num_training_steps):
        NoModelExperiment.loaded_model = True
        raise AssertionError("the model must not load when the preflight fails")


def config(tmp_path, tiny_model, train_file, *overrides):
    return load_config(
        [
            f"data.train_data=[{train_file}]",
            "data.val_data=[]",
            f"trainer.policy.model.path={tiny_model}",
            "trainer.train_batch_size=2",
            "trainer.policy_mini_batch_size=2",
            "trainer.max_prompt_length=512",
            "trainer.logger=console",
            f"trainer.ckpt_path={tmp_path / 'ckpts'}",
            f"trainer.export_path={tmp_path / 'exports'}",
            *overrides,
        ]
    )


@pytest.fixture
def gsm8k_train(tmp_path):
    write_dataset(generate_dataset(train_size=4, val_size=1, seed=0), tmp_path / "data")
    return tmp_path / "data" / "train.parquet"


def test_unknown_env_class_names_the_id_and_lists_the_registered_envs(tmp_path, tiny_model, gsm8k_train):
    cfg = config(tmp_path, tiny_model, gsm8k_train, "environment.env_class=no_such_env")
    with pytest.raises(PreflightError) as stopped:
        NoModelExperiment(cfg).run()
    message = str(stopped.value)
    assert "environment.env_class='no_such_env': no env is registered under 'no_such_env'" in message
    assert "registered: " in message and "gsm8k, gsm8k_multi_turn" in message
    assert not NoModelExperiment.loaded_model


def test_a_row_the_env_cannot_read_names_the_file_and_row(tmp_path, tiny_model):
    rows = [
        {"prompt": [{"role": "user", "content": f"q{i}"}], "env_class": "gsm8k", "reward_spec": {"ground_truth": "1"}}
        for i in range(3)
    ]
    rows[1]["reward_spec"] = None
    train_file = tmp_path / "train.jsonl"
    train_file.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    with pytest.raises(PreflightError) as stopped:
        NoModelExperiment(config(tmp_path, tiny_model, train_file)).run()
    lines = str(stopped.value).splitlines()[1:]
    assert len(lines) == 1  # rows 0 and 2 are fine
    assert f"data.train_data {train_file} row 1 (env_class 'gsm8k'): env init failed:" in lines[0]
    assert "reward_spec" in lines[0]
    assert not NoModelExperiment.loaded_model


def test_the_entrypoint_exits_1_with_the_preflight_message(tmp_path, tiny_model, gsm8k_train, capsys):
    args = [
        f"data.train_data=[{gsm8k_train}]",
        "data.val_data=[]",
        f"trainer.policy.model.path={tiny_model}",
        "trainer.train_batch_size=2",
        "trainer.policy_mini_batch_size=2",
        "environment.env_class=no_such_env",
        f"trainer.ckpt_path={tmp_path / 'ckpts'}",
        f"trainer.export_path={tmp_path / 'exports'}",
    ]
    assert main(args) == 1
    assert "Stopped: the environments cannot run on this data" in capsys.readouterr().err
