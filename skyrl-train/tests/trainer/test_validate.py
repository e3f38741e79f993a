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
    assert f"FAIL val rows: the env of each row made: PreflightError: 1 of 1 rows:\n  - val {val} row 0" in report
    assert "the env rejects this row: KeyError" in report and "ground_truth" in report
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
    assert f"  - train {train} row 0 (env_class 'no_such_env'): no env is registered under 'no_such_env'" in report


def test_a_row_after_the_first_two_is_read_whole(tmp_path, tiny_model):
    rows = [row() for _ in range(6)]
    rows[4]["reward_spec"] = None
    status, report = run(tiny_model, write_jsonl(tmp_path / "train.jsonl", rows))
    assert status == 1
    assert "ok   train env 'gsm8k' (row 0)" in report and "ok   train env 'gsm8k' (row 1)" in report
    assert f"FAIL train rows: the env of each row made: PreflightError: 1 of 6 rows:\n  - train {tmp_path}" in report
    assert "train.jsonl row 4 (env_class 'gsm8k'): the env rejects this row: KeyError" in report


def test_a_misspelled_env_block_stops_validate_naming_the_block(tmp_path, tiny_model):
    train = write_jsonl(tmp_path / "train.jsonl", [row()])
    status, report = run(tiny_model, train, None, "+environment.skyrl_gym.mcp_tools.max_calls_per_turn=1")
    assert status == 1
    assert report.startswith(
        "FAIL config:\n"
        "environment.skyrl_gym.mcp_tools: no env is registered under 'mcp_tools' (did you mean 'mcp_tool'?)"
    )
    assert "all checks passed" not in report
