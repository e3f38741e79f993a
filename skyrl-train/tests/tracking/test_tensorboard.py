"""TensorBoard backend: the event files hold every scalar at its step, readable while the run is still open."""

import math

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from skyrl_train.tracking import Tracking


def _scalars(log_dir):
    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_scalars_are_in_the_event_files_at_their_steps(tmp_path):
    with Tracking("proj", "run", "tensorboard", output_dir=tmp_path) as tracker:
        tracker.log({"reward/avg_raw_reward": 0.25, "timing/step": 2.0, "env/last_error": "timeout"}, step=1)
        tracker.log({"reward/avg_raw_reward": 0.5}, step=2)
    assert _scalars(tmp_path / "tensorboard") == {
        "reward/avg_raw_reward": [(1, 0.25), (2, 0.5)],
        "timing/step": [(1, 2.0)],
    }


def test_each_step_is_flushed_before_log_returns(tmp_path):
    tracker = Tracking("proj", "run", "tensorboard", output_dir=tmp_path)
    tracker.log({"policy/policy_loss": math.nan}, step=1)
    [(step, value)] = _scalars(tmp_path / "tensorboard")["policy/policy_loss"]
    tracker.finish()
    assert step == 1 and math.isnan(value)
