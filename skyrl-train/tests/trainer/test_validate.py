"""The validation command reports every problem of a setup without training."""

import io
import json

from skyrl_train.entrypoints.validate import validate


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def row(ground_truth="4", env_class="gsm8k"):
    return {
        "prompt": [{"role": "user", "content": "What is 2 + 2? End with #### <answer>."}],
        "env_class": env_class,
        "data_source": "toy",
        "reward_spec": {"method": "rule", "ground_truth": ground_truth},
    }


def run(tiny_model, train, val=None, *extra):
    out = io.StringIO()
    overrides = [
        *extra,
        f"trainer.policy.model.path={tiny_model}",
        f"data.train_data=[{train}]",
        f"data.val_data=[{val}]" if val else "data.val_data=[]",
        "trainer.train_batch_size=2",
        "trainer.policy_mini_batch_size=2",
    ]
    return validate(overrides, out), out.getvalue()


def test_a_good_setup_passes_every_check(tmp_path, tiny_model):
    status, report = run(tiny_model, write_jsonl(tmp_path / "train.jsonl", [row(), row("5")]))
    assert status == 0
    assert "ok   train data" in report and ": 2 rows" in report
    assert "ok   train env 'gsm8k' (row 0): init -> 1 messages; step('') -> reward=0.0, done=True" in report
    assert report.rstrip().endswith("all checks passed")


def test_bad_rows_and_failing_envs_are_all_reported(tmp_path, tiny_model):
    train = write_jsonl(tmp_path / "train.jsonl", [row(), {"prompt": "not a list", "env_class": "gsm8k"}])
    val = write_jsonl(tmp_path / "val.jsonl", [{**row(), "reward_spec": {"method": "rule"}}])
    status, report = run(tiny_model, train, val)
    assert status == 1
    assert "FAIL train data" in report and "train.jsonl: row 1: field 'prompt'" in report
    assert "FAIL val env 'gsm8k' (row 0): KeyError" in report and "ground_truth" in report
    assert report.rstrip().endswith("2 check(s) failed")


def test_an_invalid_config_stops_before_loading_anything(tmp_path):
    out = io.StringIO()
    assert validate(["trainer.polcy.model.path=x"], out) == 1
    assert "Did you mean 'trainer.policy.model.path'?" in out.getvalue()


def test_an_unknown_env_id_in_the_config_and_the_rows_is_reported_like_the_preflight_does(tmp_path, tiny_model):
    train = write_jsonl(tmp_path / "train.jsonl", [row(env_class=None)])
    status, report = run(tiny_model, train, None, "environment.env_class=no_such_env")
    assert status == 1
    assert (
        "FAIL environment.env_class='no_such_env': UnknownEnvError: no env is registered under 'no_such_env'" in report
    )
    assert "FAIL train env 'no_such_env' (row 0): UnknownEnvError: no env is registered" in report
