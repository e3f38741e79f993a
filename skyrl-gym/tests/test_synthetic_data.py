import json
import random
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

import skyrl_gym
from skyrl_gym.envs.gsm8k.synthetic_data import (
    INSTRUCTION,
    THEMES,
    generate_dataset,
    generate_problem,
    write_dataset,
)

APPLY = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def recompute(problem):
    value = problem.start
    for symbol, operand in problem.ops:
        if symbol == "/":
            assert value % operand == 0, "division must be exact"
            value //= operand
        else:
            value = APPLY[symbol](value, operand)
    return value


@pytest.fixture(scope="module")
def dataset():
    return generate_dataset(300, 60, seed=7, max_ops=3, few_shot=2)


def test_same_seed_same_data():
    assert generate_dataset(20, 5, seed=3) == generate_dataset(20, 5, seed=3)


def test_different_seed_different_data():
    assert generate_dataset(20, 5, seed=3) != generate_dataset(20, 5, seed=4)


def test_questions_do_not_depend_on_few_shot():
    questions = [r["extra_info"]["question"] for r in generate_dataset(20, 5, seed=3, few_shot=0)["train"]]
    assert questions == [r["extra_info"]["question"] for r in generate_dataset(20, 5, seed=3, few_shot=3)["train"]]


def test_answers_match_the_structured_record():
    rng = random.Random(11)
    for _ in range(500):
        problem = generate_problem(rng, max_ops=3, max_value=40)
        answer = recompute(problem)
        assert answer == problem.answer
        assert answer > 0
        assert problem.solution.endswith(f"#### {answer}")
        assert 1 <= len(problem.ops) <= 3
        assert all(1 <= operand <= 40 for _, operand in problem.ops)


def test_negative_values_only_when_allowed():
    rng = random.Random(5)
    problems = [generate_problem(rng, max_ops=3, max_value=30, allow_negative=True) for _ in range(300)]
    assert any(p.answer < 0 for p in problems)
    assert all(recompute(p) == p.answer for p in problems)


def test_every_theme_is_used(dataset):
    assert {r["extra_info"]["theme"] for r in dataset["train"]} == {t.name for t in THEMES}


def test_row_format(dataset):
    row = dataset["train"][0]
    assert row["env_class"] == "gsm8k"
    assert row["data_source"] == "synthetic_arithmetic"
    assert row["reward_spec"]["method"] == "rule"
    assert row["reward_spec"]["ground_truth"] == str(int(row["reward_spec"]["ground_truth"]))
    info = row["extra_info"]
    assert (info["split"], info["index"]) == ("train", 0)
    assert info["answer"].endswith("#### " + row["reward_spec"]["ground_truth"])
    assert row["prompt"][-1] == {"role": "user", "content": f"{info['question']}\n{INSTRUCTION}"}


def test_few_shot_prepends_worked_turns(dataset):
    prompt = dataset["validation"][0]["prompt"]
    assert [m["role"] for m in prompt] == ["user", "assistant", "user", "assistant", "user"]
    assert prompt[1]["content"].rsplit("\n", 1)[-1].startswith("#### ")


def test_no_few_shot_is_a_single_user_message():
    row = generate_dataset(1, 0, few_shot=0)["train"][0]
    assert [m["role"] for m in row["prompt"]] == ["user"]


def test_gsm8k_env_scores_every_worked_solution_one(dataset):
    for row in dataset["train"] + dataset["validation"]:
        env = skyrl_gym.make(
            row["env_class"], extras={k: v for k, v in row.items() if k not in ("prompt", "env_class")}
        )
        assert env.step(row["extra_info"]["answer"])["reward"] == 1.0


def test_train_and_validation_do_not_overlap(dataset):
    train = {r["extra_info"]["question"] for r in dataset["train"]}
    validation = {r["extra_info"]["question"] for r in dataset["validation"]}
    assert len(train) == 300
    assert len(validation) == 60
    assert not train & validation


def test_demonstrations_are_not_dataset_questions(dataset):
    questions = {r["extra_info"]["question"] for r in dataset["train"] + dataset["validation"]}
    demos = {m["content"] for r in dataset["train"] for m in r["prompt"][:-1] if m["role"] == "user"}
    assert not {d.split("\n")[0] for d in demos} & questions


def test_too_small_a_space_raises():
    with pytest.raises(ValueError, match="distinct problems"):
        generate_dataset(5000, 0, max_ops=1, max_value=2)


def test_multi_turn_env_class():
    row = generate_dataset(1, 0, env_class="gsm8k_multi_turn")["train"][0]
    assert row["env_class"] == "gsm8k_multi_turn"


def test_parquet_round_trip(tmp_path, dataset):
    paths = write_dataset(dataset, tmp_path)
    assert [p.name for p in paths] == ["train.parquet", "validation.parquet"]
    assert pq.read_table(tmp_path / "train.parquet").to_pylist() == dataset["train"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.parquet", "validation.parquet"]


def test_jsonl_round_trip(tmp_path, dataset):
    write_dataset(dataset, tmp_path, fmt="jsonl")
    lines = (tmp_path / "validation.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == dataset["validation"]


def test_cli_writes_both_files(tmp_path):
    out_dir = tmp_path / "data"
    cmd = [sys.executable, "-m", "skyrl_gym.envs.gsm8k.synthetic_data", "--output-dir", str(out_dir)]
    cmd += ["--train-size", "40", "--val-size", "10", "--seed", "1", "--max-ops", "3", "--few-shot", "1"]
    subprocess.run(cmd, check=True, capture_output=True, timeout=60)
    train = pq.read_table(out_dir / "train.parquet").to_pylist()
    validation = pq.read_table(out_dir / "validation.parquet").to_pylist()
    assert (len(train), len(validation)) == (40, 10)
    assert train == generate_dataset(40, 10, seed=1, max_ops=3, few_shot=1)["train"]
    assert sorted(p.name for p in out_dir.iterdir()) == ["train.parquet", "validation.parquet"]


def test_failed_write_keeps_the_previous_file_and_leaves_no_temp_file(tmp_path, dataset):
    write_dataset({"train": dataset["train"]}, tmp_path)
    before = (tmp_path / "train.parquet").read_bytes()
    with pytest.raises(Exception):  # noqa: B017 - pyarrow's conversion error type is not the point
        write_dataset({"train": [{"prompt": object()}]}, tmp_path)
    assert (tmp_path / "train.parquet").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["train.parquet"]
