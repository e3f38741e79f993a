"""Preflight: env failures that would make every trajectory a placeholder stop the run before the model loads."""

from __future__ import annotations

import json

import pytest

import skyrl_gym
from skyrl_gym.envs import BaseTextEnv, BaseTextEnvStepOutput
from skyrl_gym.envs.gsm8k.synthetic_data import generate_dataset, write_dataset
from skyrl_train.config import load_config
from skyrl_train.dataset import PromptDataset
from skyrl_train.entrypoints.main_base import BasePPOExp, main
from skyrl_train.preflight import PreflightError, check_envs
from skyrl_train.testing import tiny_tokenizer  # noqa: F401


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


def gsm8k_rows(tmp_path, count: int, bad: dict[int, dict]):
    """A jsonl file of `count` gsm8k rows of one data source; `bad` replaces fields of some rows."""
    rows = [
        {
            "prompt": [{"role": "user", "content": f"q{i}"}],
            "env_class": "gsm8k",
            "data_source": "toy",
            "reward_spec": {"ground_truth": "1"},
            **bad.get(i, {}),
        }
        for i in range(count)
    ]
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    return path


def test_a_row_the_env_cannot_read_names_the_file_and_row(tmp_path, tiny_model):
    train_file = gsm8k_rows(tmp_path, 3, {1: {"reward_spec": None}})
    with pytest.raises(PreflightError) as stopped:
        NoModelExperiment(config(tmp_path, tiny_model, train_file)).run()
    lines = str(stopped.value).splitlines()[1:]
    assert len(lines) == 1  # rows 0 and 2 are fine
    assert f"data.train_data {train_file} row 1 (env_class 'gsm8k'): the env rejects this row: KeyError:" in lines[0]
    assert "reward_spec" in lines[0]
    assert not NoModelExperiment.loaded_model


def test_a_bad_row_5_of_8_stops_the_run_before_the_model_loads(tmp_path, tiny_model):
    train_file = gsm8k_rows(tmp_path, 8, {5: {"reward_spec": None}})
    with pytest.raises(PreflightError) as stopped:
        NoModelExperiment(config(tmp_path, tiny_model, train_file)).run()
    (line,) = str(stopped.value).splitlines()[1:]
    assert line.startswith(f"  - data.train_data {train_file} row 5 (env_class 'gsm8k'): the env rejects this row:")
    assert not NoModelExperiment.loaded_model


def test_an_unregistered_env_class_in_a_late_row_is_named(tmp_path, tiny_model):
    train_file = gsm8k_rows(tmp_path, 8, {6: {"env_class": "gsm8k_typo"}})
    with pytest.raises(PreflightError) as stopped:
        NoModelExperiment(config(tmp_path, tiny_model, train_file)).run()
    (line,) = str(stopped.value).splitlines()[1:]
    assert line.startswith(
        f"  - data.train_data {train_file} row 6 (env_class 'gsm8k_typo'): no env is registered under 'gsm8k_typo'"
    )


def test_past_twenty_failing_rows_the_rest_are_counted(tmp_path, tiny_model):
    train_file = gsm8k_rows(tmp_path, 30, {i: {"reward_spec": None} for i in range(25)})
    with pytest.raises(PreflightError) as stopped:
        NoModelExperiment(config(tmp_path, tiny_model, train_file)).run()
    lines = str(stopped.value).splitlines()[1:]
    assert len(lines) == 21
    assert " row 19 (env_class 'gsm8k')" in lines[19]
    assert lines[20] == "  - ... and 5 more"


class CountingEnv(BaseTextEnv):
    """Counts how often it is made and initialised (class-wide)."""

    made = 0
    initialised = 0

    def __init__(self, env_config=None, extras=None):
        super().__init__()
        CountingEnv.made += 1

    def init(self, prompt):
        CountingEnv.initialised += 1
        return prompt, {}

    def step(self, action):
        return BaseTextEnvStepOutput(observations=[], reward=0.0, done=True, metadata={})


@pytest.fixture
def counting_env():
    skyrl_gym.register("preflight_counting", CountingEnv)
    CountingEnv.made = CountingEnv.initialised = 0
    yield "preflight_counting"
    skyrl_gym.deregister("preflight_counting")


def test_every_row_is_made_and_the_first_two_rows_of_each_source_are_initialised(
    tmp_path, tiny_model, tiny_tokenizer, counting_env  # noqa: F811
):
    sources = {i: {"env_class": counting_env, "data_source": "a" if i < 5 else "b"} for i in range(8)}
    train_file = gsm8k_rows(tmp_path, 8, sources)
    cfg = config(tmp_path, tiny_model, train_file)
    passed = check_envs(cfg, {"data.train_data": PromptDataset([str(train_file)], tiny_tokenizer, 512)})
    assert (CountingEnv.made, CountingEnv.initialised) == (8 + 4, 4)  # each init makes its env once more
    assert passed[0] == "the env of each of 8 rows made"
    assert [line.split(" row ")[1] for line in passed[1:]] == [
        f"{i} (env_class {counting_env!r}): init ok" for i in (0, 1, 5, 6)
    ]


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
