"""JSONL backend: exact file contents, strict JSON for NaN/inf, and steps on disk after a SIGKILL."""

import json
import math
import subprocess
import sys
import time

import pytest

from skyrl_train.tracking import Tracking


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_each_log_call_appends_one_line_with_step_timestamp_and_metrics(tmp_path):
    before = time.time()
    with Tracking("proj", "run", "jsonl", output_dir=tmp_path) as tracker:
        tracker.log({"reward/avg_raw_reward": 0.25, "trainer/global_step": 1}, step=1)
        tracker.log({"reward/avg_raw_reward": 0.5, "trainer/global_step": 2}, step=2)
        tracker.log({"eval/all/avg_score": 0.75}, step=2)
    records = _records(tmp_path / "metrics.jsonl")
    timestamps = [r.pop("timestamp") for r in records]
    assert records == [
        {"step": 1, "reward/avg_raw_reward": 0.25, "trainer/global_step": 1},
        {"step": 2, "reward/avg_raw_reward": 0.5, "trainer/global_step": 2},
        {"step": 2, "eval/all/avg_score": 0.75},
    ]
    assert before <= timestamps[0] <= timestamps[1] <= timestamps[2] <= time.time()


def test_nan_and_inf_are_written_as_null_and_strings_are_kept(tmp_path):
    with Tracking("proj", "run", "jsonl", output_dir=tmp_path) as tracker:
        tracker.log(
            {"policy/policy_loss": math.nan, "policy/grad_norm": -math.inf, "env/last_error": "timeout"}, step=1
        )
    line = (tmp_path / "metrics.jsonl").read_text()
    assert "NaN" not in line and "Infinity" not in line
    record = json.loads(line)
    del record["timestamp"]
    assert record == {"step": 1, "policy/policy_loss": None, "policy/grad_norm": None, "env/last_error": "timeout"}


def test_a_metric_named_like_a_reserved_field_is_an_error(tmp_path):
    with Tracking("proj", "run", "jsonl", output_dir=tmp_path) as tracker, pytest.raises(ValueError, match="step"):
        tracker.log({"step": 3.0}, step=3)


def test_a_resumed_run_appends_to_the_existing_file(tmp_path):
    with Tracking("proj", "run", "jsonl", output_dir=tmp_path) as tracker:
        tracker.log({"a/x": 1}, step=1)
    with Tracking("proj", "run", "jsonl", output_dir=tmp_path) as tracker:
        tracker.log({"a/x": 2}, step=2)
    assert [r["step"] for r in _records(tmp_path / "metrics.jsonl")] == [1, 2]


_LOG_TWO_STEPS_THEN_HANG = """
import sys, time
from skyrl_train.tracking import Tracking
tracker = Tracking("proj", "run", "jsonl", output_dir=sys.argv[1])
tracker.log({"reward/avg_raw_reward": 0.25}, step=1)
tracker.log({"reward/avg_raw_reward": 0.5}, step=2)
print("logged", flush=True)
time.sleep(120)
"""


def test_steps_logged_before_a_sigkill_are_on_disk(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-c", _LOG_TWO_STEPS_THEN_HANG, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline() == "logged\n"
    finally:
        proc.kill()  # SIGKILL: no atexit, no close(), no buffer flush
        proc.wait(timeout=30)
        proc.stdout.close()
    assert proc.returncode == -9
    records = _records(tmp_path / "metrics.jsonl")
    assert [(r["step"], r["reward/avg_raw_reward"]) for r in records] == [(1, 0.25), (2, 0.5)]
