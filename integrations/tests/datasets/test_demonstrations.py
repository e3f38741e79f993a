"""Demonstrations made by the env itself: the main job's training questions (the real generator, entities held out)
played through the real MCP env and market server, replayed in a fresh env, and refused for rows the solver cannot
play."""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
from pathlib import Path

import pytest

import skyrl_gym
from skyrl_integrations.datasets import demonstrations, rule_based
from skyrl_integrations.datasets.demonstrations import DemonstrationError, make_demonstrations, plan_rows
from skyrl_integrations.datasets.io import read_rows, write_dataset
from skyrl_integrations.mcp.prompt import call_text
from skyrl_integrations.mcp.servers.market.data import MARKET

REPO = Path(__file__).resolve().parents[3]
TEMPLATES = ["price_field", "price_field_by_name", "financial_field", "month_end_close"]
ENV_CONFIG = {
    "max_calls_per_turn": 1,
    "reward_weights": {"format": 0, "tools": 0, "params": 0},
    "last_turn_note": "",
    "demonstrations": str(REPO / "examples" / "mcp" / "demonstrations.json"),
}
"""The main job's env block (tests/test_example_presets.py checks that run_grpo.sh passes the resolved one)."""
MAX_TURNS = 3
OPENING = 1 + 8 + 1
"""System message, the four worked exchanges of examples/mcp/demonstrations.json, the question."""


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The main job's questions at a smaller size (24 training, 16 unseen, 8 seen) and their demonstrations."""
    folder = tmp_path_factory.mktemp("demonstrations")
    rule_based.main(
        ["--output-dir", str(folder), "--train-size", "24", "--val-size", "16", "--seen-val-size", "8"]
        + ["--templates", ",".join(TEMPLATES), "--balance-templates", "--held-out-entities"]
        + ["--complexities", "single,multi_step", "--hint-fraction", "0.5", "--seed", "0"]
    )
    status = demonstrations.main(
        ["--data", str(folder / "train.parquet"), "--output", str(folder / "warm_start.jsonl")]
        + ["--env-config", json.dumps(ENV_CONFIG), "--max-turns", str(MAX_TURNS), "--recovery-fraction", "0.25"]
    )
    assert status == 0
    return folder


@pytest.fixture(scope="module")
def episodes(data):
    return [json.loads(line) for line in (data / "warm_start.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def rows(data):
    return {row["reward_spec"]["ground_truth"]["task_id"]: row for row in read_rows(data / "train.parquet", "test")}


def _env(row):
    extras = {key: value for key, value in row.items() if key not in ("prompt", "env_class")}
    return skyrl_gym.make("mcp_tool", env_config=ENV_CONFIG, extras={**extras, "max_turns": MAX_TURNS})


def _replay(episode, row) -> float:
    """Step a fresh env with the episode's assistant replies; every observation must be the one written. Returns the
    reward of the step that ended the episode."""
    env = _env(row)
    try:
        opening, _ = env.init(copy.deepcopy(row["prompt"]))
        assert episode["prompt"] == opening
        rest, reward = [{k: v for k, v in m.items() if k != "weight"} for m in episode["completion"]], None
        while rest:
            reply, rest = rest[0], rest[1:]
            assert reply["role"] == "assistant" and reward is None
            step = env.step(reply["content"])
            observations, rest = rest[: len(step["observations"])], rest[len(step["observations"]) :]
            assert step["observations"] == observations
            if step["done"]:
                reward = step["reward"]
        return reward
    finally:
        env.close()


def test_every_episode_replays_in_a_fresh_env_to_the_written_observations_and_reward_one(episodes, rows):
    assert len(episodes) == 24
    assert [_replay(episode, rows[episode["task_id"]]) for episode in episodes] == [1.0] * 24


def test_a_plain_episode_makes_the_recipes_calls_and_answers_the_expected_answer(episodes, rows):
    plain = [e for e in episodes if e["kind"] == "plain"]
    assert {e["template"] for e in plain} == set(TEMPLATES)
    for episode in plain:
        truth = rows[episode["task_id"]]["reward_spec"]["ground_truth"]
        entity = rows[episode["task_id"]]["extra_info"]["entity_text"]
        calls = [  # search_tickers' query, left out of the row, is the company name
            call_text(step["tool"], {"query": entity} if step["tool"] == "search_tickers" else step["params"])
            for step in truth["tool_sequence"]
        ]
        replies = [m["content"] for m in episode["completion"] if m["role"] == "assistant"]
        assert replies == [*calls, truth["success"]["expected_answer"]]


def test_a_quarter_of_the_episodes_recover_from_the_tool_error_of_a_plausible_mistake(episodes, rows):
    recovering = [e for e in episodes if e["kind"] == "recovery"]
    assert len(recovering) == 6  # 0.25 of 24; the templates take turns, by-name questions have no turn to spare
    assert sorted(e["template"] for e in recovering) == sorted(
        ["price_field", "financial_field", "month_end_close"] * 2
    )
    for episode in recovering:
        row = rows[episode["task_id"]]
        (step,) = row["reward_spec"]["ground_truth"]["tool_sequence"]
        params = step["params"]
        mistake, error, call, result, answer = episode["completion"]
        if step["tool"] == "get_stock_price":
            wrong = call_text("get_crypto_price", {"symbol": params["ticker"], "date": params["date"]})
            told = "Tool error (get_crypto_price): Not a crypto symbol but a stock ticker: get_stock_price gives stock prices"
        elif step["tool"] == "get_financials":
            wrong = call_text("get_stock_price", {"ticker": params["ticker"], "date": params["period"]})
            told = (
                f"Tool error (get_stock_price): Invalid date '{params['period']}': that is a period, not a day; "
                "get_financials takes periods"
            )
        else:
            end = dt.date.fromisoformat(params["end_date"])
            day = params["end_date"] if end.weekday() >= 5 else params["end_date"][:7]
            wrong = call_text("get_stock_price", {"ticker": params["ticker"], "date": day})
            told = (
                f"Tool error (get_stock_price): No trading on {day} (a {end:%A}): get_price_history lists the trading "
                "days of a date range"
                if end.weekday() >= 5
                else f"Tool error (get_stock_price): Invalid date '{day}': use YYYY-MM-DD, e.g. 2024-03-15"
            )
        assert mistake == {"role": "assistant", "content": wrong, "weight": 0}  # the mistake is not trained on
        assert error == {"role": "user", "content": told}
        assert call == {"role": "assistant", "content": call_text(step["tool"], params)}
        assert result["content"].startswith(f"Tool result ({step['tool']}):\n")
        assert answer == {
            "role": "assistant",
            "content": row["reward_spec"]["ground_truth"]["success"]["expected_answer"],
        }


def test_the_prompt_holds_the_worked_examples_and_only_a_mistake_is_marked_not_to_train_on(episodes):
    demos = json.loads((REPO / "examples" / "mcp" / "demonstrations.json").read_text())
    for episode in episodes:
        prompt = episode["prompt"]
        assert len(prompt) == OPENING and prompt[1:-1] == demos and prompt[-1]["role"] == "user"
        assert episode["completion"][0]["role"] == "assistant"
        weighted = [m for m in episode["completion"] if "weight" in m]
        assert weighted == ([episode["completion"][0]] if episode["kind"] == "recovery" else [])


def _name_word(name: str) -> str:
    """The word a company's name is known by ("The Coca-Cola Company" -> "Coca-Cola")."""
    return next(word for word in name.replace(",", "").split() if word != "The")


def test_no_held_out_company_or_month_appears_in_the_demonstrations(data, episodes):
    unseen = [r for r in read_rows(data / "validation.parquet", "test") if r["extra_info"]["entity_split"] == "unseen"]
    tickers = {r["extra_info"]["entity"].partition("/")[0] for r in unseen}
    months = {r["extra_info"]["entity"].partition("/")[2] for r in unseen} - {""}
    assert len(tickers) >= 5 and len(months) >= 2
    patterns = [re.compile(rf"(?<![A-Za-z]){ticker}(?![A-Za-z])") for ticker in tickers]
    patterns += [re.compile(rf"\b{re.escape(_name_word(MARKET.companies[t].name))}\b", re.I) for t in tickers]
    for month in months:  # a month-end question names its month; its call asks for the month's prices
        patterns += [
            re.compile(f"{dt.date.fromisoformat(f'{month}-01'):%B %Y}"),
            re.compile(f'"start_date": "{month}-'),
        ]
    # The patterns find the held-out questions' entities...
    for row in unseen:
        question = row["prompt"][-1]["content"]
        assert any(p.search(question) for p in patterns), question
    # ...and none in the demonstrations (the worked examples of the prompt included).
    for episode in episodes:
        text = "\n".join(m["content"] for m in [*episode["prompt"], *episode["completion"]])
        assert [p.pattern for p in patterns if p.search(text)] == [], episode["task_id"]


def test_validation_questions_are_refused_naming_the_row(data, capsys):
    output = data / "from_validation.jsonl"
    status = demonstrations.main(["--data", str(data / "validation.parquet"), "--output", str(output)])
    assert (status, output.exists()) == (1, False)
    assert capsys.readouterr().err == (
        f"demonstrations: error: {data / 'validation.parquet'}: row 0: extra_info.split is 'validation': "
        "demonstrations come from training questions only\n"
    )


def test_a_row_of_a_template_the_solver_cannot_play_is_refused_naming_it(tmp_path, capsys):
    # A Python question: the program is the agent's own wording, left out of the row's params.
    tasks = rule_based.generate_tasks(2, 0, servers=["python"], templates=["fibonacci"], seed=0)
    write_dataset(tasks, tmp_path, val_ratio=0.0, formats=("jsonl",))
    status = demonstrations.main(["--data", str(tmp_path / "train.jsonl"), "--output", str(tmp_path / "out.jsonl")])
    assert (status, (tmp_path / "out.jsonl").exists()) == (1, False)
    assert capsys.readouterr().err == (
        f"demonstrations: error: {tmp_path / 'train.jsonl'}: row 0 ({tasks[0].task_id}): step 1 (python.run_python) "
        "leaves ['code', 'timeout_s'] to the agent's own wording; the solver writes only search_tickers' query (the "
        "company name)\n"
    )


def test_more_recovery_episodes_than_rows_with_a_turn_to_spare_are_refused(data):
    plans = plan_rows(read_rows(data / "train.parquet", "test"), "train.parquet", ENV_CONFIG, MAX_TURNS)
    with pytest.raises(DemonstrationError) as error:
        make_demonstrations(plans, ENV_CONFIG, MAX_TURNS, recovery_fraction=1.0)
    assert str(error.value) == (
        "recovery_fraction 1.0 asks for 24 recovery episodes of 24, but only 18 rows have a mistake and a turn to "
        "spare for it (max_turns: --max-turns or the row's)"
    )


def test_a_limit_takes_the_templates_in_turn(data):
    plans = plan_rows(read_rows(data / "train.parquet", "test"), "train.parquet", ENV_CONFIG, MAX_TURNS)
    made = make_demonstrations(plans, ENV_CONFIG, MAX_TURNS, recovery_fraction=0.5, limit=8)
    first = list(dict.fromkeys(plan.template for plan in plans))
    assert [e["template"] for e in made] == first * 2
    assert [e["kind"] for e in made].count("recovery") == 4


def test_excluded_questions_are_not_played_and_nothing_left_is_an_error(data, capsys):
    # The main job's warm-start questions: a draw of their own (another seed, no hints), less the run's questions.
    own = data / "own"
    rule_based.main(
        ["--output-dir", str(own), "--train-size", "48", "--val-size", "0", "--templates", ",".join(TEMPLATES)]
        + ["--balance-templates", "--held-out-entities", "--complexities", "single,multi_step", "--seed", "1"]
    )
    run_ids = {
        row["reward_spec"]["ground_truth"]["task_id"]
        for name in ("train.parquet", "validation.parquet")
        for row in read_rows(data / name, "test")
    }
    own_ids = [row["reward_spec"]["ground_truth"]["task_id"] for row in read_rows(own / "train.parquet", "test")]
    assert run_ids & set(own_ids), "the two draws share no question: the exclusion would not be tested"
    output = own / "warm_start.jsonl"
    excluded = ["--exclude", str(data / "train.parquet"), "--exclude", str(data / "validation.parquet")]
    status = demonstrations.main(
        ["--data", str(own / "train.parquet"), "--output", str(output), "--env-config", json.dumps(ENV_CONFIG)]
        + ["--max-turns", str(MAX_TURNS), "--recovery-fraction", "0"]
        + excluded
    )
    assert status == 0
    written = [json.loads(line)["task_id"] for line in output.read_text().splitlines()]
    assert sorted(written) == sorted(i for i in own_ids if i not in run_ids)

    status = demonstrations.main(
        ["--data", str(data / "train.parquet"), "--output", str(data / "none.jsonl"), "--exclude"]
        + [str(data / "train.parquet")]
    )
    assert (status, (data / "none.jsonl").exists()) == (1, False)
    assert capsys.readouterr().err == (
        f"demonstrations: error: every row of {data / 'train.parquet'} is in {data / 'train.parquet'}\n"
    )
