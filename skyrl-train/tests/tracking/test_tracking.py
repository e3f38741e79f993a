"""`Tracking` itself: backend selection, lifecycle, value handling, and the config every backend receives."""

import json
import logging

import numpy as np
import pytest
import torch

from skyrl_train.config import SkyRLConfig
from skyrl_train.tracking import Tracking


def test_unknown_backend_is_an_error_naming_it_and_the_valid_ones(tmp_path):
    with pytest.raises(ValueError) as excinfo:
        Tracking("proj", "run", ["jsonl", "neptune"], output_dir=tmp_path)
    message = str(excinfo.value)
    assert "'neptune'" in message
    assert "['console', 'jsonl', 'mlflow', 'tensorboard', 'wandb']" in message


def test_backends_may_be_one_name_or_a_list(tmp_path):
    assert list(Tracking("proj", "run", "console").backends) == ["console"]
    both = Tracking("proj", "run", ["console", "jsonl"], output_dir=tmp_path)
    assert list(both.backends) == ["console", "jsonl"]
    both.finish()


def test_console_only_creates_no_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Tracking("proj", "run", "console").finish()
    assert list(tmp_path.iterdir()) == []


def test_with_an_output_dir_metrics_jsonl_is_written_whatever_the_backends(tmp_path):
    with Tracking("proj", "run", "console", output_dir=tmp_path) as tracker:
        tracker.log({"reward/avg_raw_reward": 0.5}, step=1)
    assert list(tracker.backends) == ["console", "jsonl"]
    [record] = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert (record["step"], record["reward/avg_raw_reward"]) == (1, 0.5)


def test_backends_without_a_run_of_their_own_have_no_state_and_resume_must_come_first(tmp_path):
    tracker = Tracking("proj", "run", ["console", "jsonl", "tensorboard"], output_dir=tmp_path)
    assert tracker.state() == {}
    tracker.resume({"wandb": {"run_id": "abc"}})  # a backend this run does not have: nothing to continue
    tracker.log({"a/x": 1.0}, step=1)
    with pytest.raises(RuntimeError, match="after log"):
        tracker.resume({})
    tracker.finish()


def test_finish_twice_is_safe_and_log_after_finish_is_an_error(tmp_path):
    tracker = Tracking("proj", "run", "jsonl", output_dir=tmp_path)
    tracker.finish()
    tracker.finish()
    with pytest.raises(RuntimeError, match="after finish"):
        tracker.log({"a/x": 1.0}, step=1)


def test_numpy_and_tensor_scalars_and_bools_are_logged_as_numbers(tmp_path):
    with Tracking("proj", "run", "jsonl", output_dir=tmp_path) as tracker:
        tracker.log({"a/np": np.float32(0.5), "a/torch": torch.tensor(2), "a/flag": True, "a/one": np.array([3.0])}, 1)
    record = json.loads((tmp_path / "metrics.jsonl").read_text())
    assert {k: record[k] for k in ("a/np", "a/torch", "a/flag", "a/one")} == {
        "a/np": 0.5,
        "a/torch": 2,
        "a/flag": 1,
        "a/one": 3.0,
    }


def test_lists_dicts_and_none_are_dropped_with_one_warning_per_key(tmp_path, caplog):
    with caplog.at_level(logging.WARNING), Tracking("proj", "run", "jsonl", output_dir=tmp_path) as tracker:
        tracker.log({"a/hist": [1, 2], "a/none": None, "a/x": 1.0}, step=1)
        tracker.log({"a/hist": [3], "a/x": 2.0}, step=2)
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [sorted(r) for r in lines] == [["a/x", "step", "timestamp"]] * 2
    assert sorted(r.getMessage() for r in caplog.records) == [
        "tracking: metric 'a/hist' is not a number or string; not logged",
        "tracking: metric 'a/none' is not a number or string; not logged",
    ]


def test_backends_receive_the_config_with_secrets_redacted(tmp_path):
    config = {
        "trainer": {"lr": 1e-6, "api_key": "sk-live-123"},  # pragma: allowlist secret
        "env_vars": {"AWS_SECRET_ACCESS_KEY": "abc"},
    }  # pragma: allowlist secret
    Tracking("proj", "run", "jsonl", config=config, output_dir=tmp_path).finish()
    assert json.loads((tmp_path / "config.json").read_text()) == {
        "trainer": {"lr": 1e-6, "api_key": "<redacted>"},
        "env_vars": {"AWS_SECRET_ACCESS_KEY": "<redacted>"},
    }


def test_a_typed_config_is_logged_as_plain_sections(tmp_path):
    Tracking("proj", "run", "jsonl", config=SkyRLConfig(), output_dir=tmp_path).finish()
    logged = json.loads((tmp_path / "config.json").read_text())
    assert sorted(logged) == ["data", "environment", "generator", "sft", "trainer"]
    assert logged["trainer"]["project_name"] == "skyrl"


def test_metric_values_with_secret_names_are_redacted(tmp_path):
    with Tracking("proj", "run", "jsonl", output_dir=tmp_path) as tracker:
        tracker.log({"env/hf_token": "hf_abc", "a/x": 1.0}, step=1)
    record = json.loads((tmp_path / "metrics.jsonl").read_text())
    assert record["env/hf_token"] == "<redacted>"
