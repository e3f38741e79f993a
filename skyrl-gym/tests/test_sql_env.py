import sqlite3

import pytest
from omegaconf import OmegaConf

import skyrl_gym
from skyrl_gym.envs.sql.env import SQLEnv, Text2SQLEnvConfig
from skyrl_gym.tools.sql import INVALID_ACTION_MESSAGE

GOLD = "SELECT name FROM singer WHERE age > 30"


@pytest.fixture
def db_path(tmp_path):
    """A spider-style layout: <db_path>/spider/database/<db_id>/<db_id>.sqlite."""
    db_dir = tmp_path / "spider" / "database" / "concert"
    db_dir.mkdir(parents=True)
    conn = sqlite3.connect(db_dir / "concert.sqlite")
    conn.execute("CREATE TABLE singer (id INTEGER, name TEXT, age INTEGER)")
    conn.executemany("INSERT INTO singer VALUES (?, ?, ?)", [(1, "Ann", 25), (2, "Bo", 35), (3, "Cy", 41)])
    conn.commit()
    conn.close()
    return str(tmp_path)


def make_env(db_path, env_config=None, max_turns=3, data="spider"):
    extras = {"db_id": "concert", "data": data, "reward_spec": {"ground_truth": GOLD}, "max_turns": max_turns}
    return skyrl_gym.make("text2sql", env_config=env_config or {"db_path": db_path}, extras=extras)


def test_sql_turn_then_correct_solution_rewards_one(db_path):
    env = make_env(db_path)
    out = env.step("Let me look.\n<sql>SELECT name, age FROM singer WHERE id = 2</sql>")
    assert out["done"] is False
    assert out["reward"] == 0.0
    assert out["observations"] == [
        {
            "role": "user",
            "content": "<observation>name | age\n----------\nBo | 35\n"
            "<reminder>You have 2 turns left to complete the task.</reminder></observation>",
        }
    ]
    out = env.step("<solution>SELECT name FROM singer WHERE age >= 35</solution>")
    assert (out["reward"], out["done"], out["observations"]) == (1.0, True, [])


def test_rows_compare_as_sets(db_path):
    out = make_env(db_path).step(
        "<solution>SELECT name FROM singer WHERE age > 30 UNION ALL SELECT 'Cy' ORDER BY name DESC</solution>"
    )
    assert out["reward"] == 1.0


def test_wrong_solution_rewards_zero(db_path):
    out = make_env(db_path).step("<solution>SELECT name FROM singer</solution>")
    assert (out["reward"], out["done"]) == (0.0, True)


def test_failing_solution_rewards_zero(db_path):
    out = make_env(db_path).step("<solution>SELECT nope FROM singer</solution>")
    assert (out["reward"], out["done"]) == (0.0, True)


def test_no_solution_at_max_turns_rewards_minus_one(db_path):
    env = make_env(db_path, max_turns=2)
    assert env.step("<sql>SELECT count(*) FROM singer</sql>")["done"] is False
    out = env.step("<sql>SELECT 1</sql>")
    assert (out["reward"], out["done"], out["observations"]) == (-1.0, True, [])


def test_solution_wins_over_sql_in_the_same_action(db_path):
    out = make_env(db_path).step(f"<sql>SELECT 1</sql> <solution>{GOLD}</solution>")
    assert (out["reward"], out["done"]) == (1.0, True)


def test_unclosed_solution_is_not_a_solution(db_path):
    out = make_env(db_path).step(f"<solution>{GOLD}")
    assert out["done"] is False
    assert INVALID_ACTION_MESSAGE in out["observations"][0]["content"]


def test_sql_error_comes_back_as_observation(db_path):
    out = make_env(db_path).step("<sql>SELECT * FROM missing</sql>")
    assert out["done"] is False
    assert out["observations"][0]["content"].startswith("<observation>Error executing SQL: no such table: missing")


def test_dataclass_config_and_default_max_turns(db_path):
    extras = {"db_id": "concert", "data": "spider", "reward_spec": {"ground_truth": GOLD}}
    env = SQLEnv(Text2SQLEnvConfig(db_path=db_path), extras)
    assert env.max_turns == 5
    assert env.step(f"<solution>{GOLD}</solution>")["reward"] == 1.0


def test_data_selects_the_subdirectory(db_path):
    env = make_env(db_path, data="bird")
    assert env.db_root.as_posix().endswith("bird/train/train_databases")
    assert make_env(db_path, data="synsql").db_root.as_posix().endswith("SynSQL-2.5M/databases")


def test_unknown_data_is_rejected(db_path):
    with pytest.raises(ValueError, match="extras\\['data'\\] must be one of"):
        make_env(db_path, data="wikisql")


def test_missing_db_id_is_rejected(db_path):
    with pytest.raises(KeyError, match="db_id"):
        skyrl_gym.make("text2sql", env_config={"db_path": db_path}, extras={"data": "spider"})


def test_dictconfig_env_config(db_path):
    env = make_env(db_path, env_config=OmegaConf.create({"db_path": db_path}))
    assert env.step(f"<solution>{GOLD}</solution>")["reward"] == 1.0
