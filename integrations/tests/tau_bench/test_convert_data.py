"""`python -m skyrl_integrations.tau_bench.convert_data`: SkyRL rows from tau2 tasks, official or ratio split."""

from __future__ import annotations

import json

import pytest

import skyrl_gym
from skyrl_integrations.tau_bench.convert_data import main


def _rows(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_official_split_by_default(tmp_path, capsys):
    assert main(["--domain", "retail", "--output_dir", str(tmp_path)]) == 0
    train, test = _rows(tmp_path / "train.jsonl"), _rows(tmp_path / "test.jsonl")
    assert (len(train), len(test)) == (74, 40)
    assert [row["extra_info"]["task_id"] for row in test[:6]] == ["5", "9", "12", "17", "18", "26"]
    assert capsys.readouterr().err.splitlines() == [
        f"train: 74 rows -> {tmp_path / 'train.jsonl'}",
        f"test: 40 rows -> {tmp_path / 'test.jsonl'}",
    ]


def test_a_row_holds_the_gold_actions_outputs_and_instruction(tmp_path):
    main(["--domain", "retail", "--output_dir", str(tmp_path)])
    row = next(r for r in _rows(tmp_path / "train.jsonl") if r["extra_info"]["task_id"] == "2")
    assert row["env_class"] == "tau_bench" and row["data_source"] == "tau_bench_retail"
    assert row["prompt"] == [{"role": "system", "content": "You are a customer service agent for the retail domain."}]
    truth = row["reward_spec"]["ground_truth"]
    assert row["reward_spec"]["method"] == "rule"
    assert (len(truth["actions"]), truth["communicate_info"], truth["reward_basis"]) == (
        11,
        ["10"],
        ["DB", "COMMUNICATE"],
    )
    assert truth["actions"][0] == {
        "name": "find_user_id_by_name_zip",
        "arguments": {"first_name": "Yusuf", "last_name": "Rossi", "zip": "19122"},
    }
    assert row["extra_info"]["split"] == "train" and row["extra_info"]["domain"] == "retail"
    assert row["extra_info"]["instruction"].startswith("Instructions:\n\tDomain: retail\n\tReason for call:")


def test_a_converted_row_runs_in_the_env_and_its_gold_actions_score_1(tmp_path, replay):
    main(["--domain", "airline", "--output_dir", str(tmp_path)])
    row = _rows(tmp_path / "test.jsonl")[0]
    extras = {k: v for k, v in row.items() if k not in ("prompt", "env_class")}
    env = skyrl_gym.make(row["env_class"], env_config={}, extras=extras)
    actions = row["reward_spec"]["ground_truth"]["actions"]
    out = replay(env, actions, "Done. " + " ".join(row["reward_spec"]["ground_truth"]["communicate_info"]))
    assert out["reward"] == 1.0


def test_train_ratio_shuffles_the_base_tasks_with_the_seed(tmp_path):
    for name, seed in (("a", "0"), ("b", "0"), ("c", "1")):
        main(["--domain", "airline", "--output_dir", str(tmp_path / name), "--train_ratio", "0.9", "--seed", seed])
    ids = {
        name: [[r["extra_info"]["task_id"] for r in _rows(tmp_path / name / f"{s}.jsonl")] for s in ("train", "test")]
        for name in "abc"
    }
    assert (len(ids["a"][0]), len(ids["a"][1])) == (45, 5)
    assert sorted(ids["a"][0] + ids["a"][1], key=int) == [str(i) for i in range(50)]
    assert ids["a"] == ids["b"] and ids["a"] != ids["c"]


@pytest.mark.parametrize("ratio", ["0", "1.0", "0.001"])
def test_a_bad_train_ratio_is_an_error(tmp_path, ratio, capsys):
    with pytest.raises(SystemExit):
        main(["--domain", "retail", "--output_dir", str(tmp_path), "--train_ratio", ratio])
    assert "--train_ratio" in capsys.readouterr().err
