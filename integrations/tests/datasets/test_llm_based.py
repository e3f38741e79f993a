"""LLM-based generation without a model: config knobs, reply parsing, planning, and validation by execution of
hand-written replies on the real bundled servers. (The model-backed runs are in test_llm_based_serving.py.)"""

from __future__ import annotations

import json

import pytest

from skyrl_integrations.datasets.llm_based import (
    GenerationConfigError,
    LLMGenerationConfig,
    LLMTaskGenerator,
    Rejected,
    TaskPlan,
    main,
    parse_reply,
)
from skyrl_integrations.datasets.llm_seeds import SEED_TASKS
from skyrl_integrations.datasets.replay import answer_from_result
from skyrl_integrations.datasets.schema import ToolStep, validate_row

PRICE_TOOL = {
    "name": "get_stock_price",
    "description": "Daily prices",
    "inputSchema": {
        "type": "object",
        "properties": {"ticker": {"type": "string"}, "date": {"type": "string"}},
        "required": ["ticker", "date"],
    },
}


@pytest.fixture(scope="module")
def generator():
    config = LLMGenerationConfig(domains=("market", "search"), complexities=("single", "multi_step", "cross_server"))
    with LLMTaskGenerator(config) as generator:
        yield generator


def price_plan(generator, attempt: int = 0) -> TaskPlan:
    demos = (SEED_TASKS[1], SEED_TASKS[0])
    return TaskPlan(
        attempt, "single", (("market", "get_stock_price"),), {"ticker": "MSFT", "date": "2024-06-03"}, demos
    )


def reply(question: str, *calls, answer_field: str = "close") -> str:
    body = [{"tool": tool, "arguments": arguments} for tool, arguments in calls]
    return json.dumps({"question": question, "calls": body, "answer_field": answer_field})


# ------------------------------------------------------------------------------------------------ config


def test_config_reads_the_environment():
    environ = {
        "N_SAMPLES": "6",
        "OPENAI_MODEL": "m",
        "OPENAI_BASE_URL": "http://h:1/v1",
        "MAX_TOOLS": "3",
        "MAX_TURNS": "5",
        "DOMAINS": "market, slack",
        "COMPLEXITIES": "single,multi_step",
    }
    config = LLMGenerationConfig.from_env(environ)
    assert (config.n_samples, config.model, config.base_url, config.max_tools, config.max_turns) == (
        6,
        "m",
        "http://h:1/v1",
        3,
        5,
    )
    assert (config.domains, config.complexities) == (("market", "slack"), ("single", "multi_step"))


def test_flags_win_over_the_environment():
    config = LLMGenerationConfig.from_env(
        {"N_SAMPLES": "6", "DOMAINS": "slack", "COMPLEXITIES": "single"}, n_samples=2, domains=None
    )
    assert (config.n_samples, config.domains) == (2, ("slack",))


def test_bad_integer_names_the_variable():
    with pytest.raises(GenerationConfigError, match=r"^N_SAMPLES: expected an integer, got 'many'$"):
        LLMGenerationConfig.from_env({"N_SAMPLES": "many"})


def test_unknown_domain_names_the_knob():
    with pytest.raises(
        GenerationConfigError, match=r"^DOMAINS / --domains: expected bundled server names .* \['weather'\]"
    ):
        LLMGenerationConfig.from_env({"DOMAINS": "market,weather"})


def test_cross_server_needs_two_domains():
    with pytest.raises(GenerationConfigError, match="cross_server questions need at least two domains"):
        LLMGenerationConfig(domains=("market",), complexities=("cross_server",))


def test_max_turns_must_cover_the_calls():
    with pytest.raises(GenerationConfigError, match=r"^MAX_TURNS / --max-turns: must allow one turn per call"):
        LLMGenerationConfig(max_tools=3, max_turns=2, complexities=("multi_step",))


def test_cli_refuses_existing_output_before_asking_the_model(tmp_path, capsys):
    (tmp_path / "train.parquet").write_bytes(b"old")
    with pytest.raises(SystemExit) as info:
        main(["--output-dir", str(tmp_path), "--base-url", "http://127.0.0.1:9/v1"])
    assert info.value.code == 2
    assert f"refusing to overwrite existing {tmp_path}/train.parquet" in capsys.readouterr().err
    assert (tmp_path / "train.parquet").read_bytes() == b"old"


# ----------------------------------------------------------------------------------------------- parsing


def test_parse_reply_reads_the_task_object():
    text = 'Sure!\n{"question": "What was MSFT worth?", "calls": [{"tool": "get_stock_price", "arguments": {"ticker": "MSFT"}}], "answer_field": "close"}'
    candidate = parse_reply(text, [PRICE_TOOL])
    assert (candidate.question, candidate.calls, candidate.answer_field) == (
        "What was MSFT worth?",
        [("get_stock_price", {"ticker": "MSFT"})],
        "close",
    )


def test_parse_reply_recovers_fields_from_a_broken_object():
    # A 135M-model reply: one closing brace too many after the arguments.
    text = (
        '{"question": "What is the price of MSFT on 2024-06-03?", "calls": [{"tool": "get_stock_price", '
        '"arguments": {"ticker": "MSFT", "date": "2024-06-03"}}}, "answer_field": "close"}'
    )
    candidate = parse_reply(text, [PRICE_TOOL])
    assert (candidate.question, candidate.calls, candidate.answer_field) == (
        "What is the price of MSFT on 2024-06-03?",
        [("get_stock_price", {"ticker": "MSFT", "date": "2024-06-03"})],
        "close",
    )


def test_reply_without_json_is_rejected():
    with pytest.raises(Rejected) as info:
        parse_reply("import requests\nrequests.get(url)", [PRICE_TOOL])
    assert info.value.reason == "no_json"


def test_reply_with_a_one_word_question_is_rejected():
    with pytest.raises(Rejected) as info:
        parse_reply('{"question": "Price?", "calls": []}', [PRICE_TOOL])
    assert info.value.reason == "no_question"


# ---------------------------------------------------------------------------------------------- planning


def test_plans_follow_the_seed(generator):
    first = [generator.plan(i) for i in range(6)]
    config = generator.config
    with LLMTaskGenerator(config, servers=generator.servers) as again:
        assert [again.plan(i) for i in range(6)] == first


def test_cross_server_plans_use_two_servers(generator):
    plans = [generator.plan(i) for i in range(30)]
    cross = [p for p in plans if p.complexity == "cross_server"]
    assert cross and all(len(p.servers) == 2 for p in cross)
    assert all(len(p.steps) == 1 for p in plans if p.complexity == "single")


def test_messages_are_system_then_two_demonstrations_then_the_request(generator):
    messages = generator.messages(price_plan(generator))
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert messages[-1]["content"] == (
        "You can call these tools:\n"
        "- get_stock_price(ticker: string, date: string): Daily open/high/low/close/volume of a stock on one "
        "trading day.\n"
        "Values: ticker=MSFT, date=2024-06-03"
    )
    assert json.loads(messages[4]["content"]) == SEED_TASKS[0].as_reply()


# -------------------------------------------------------------------------------------------- validation


def test_valid_reply_becomes_a_task_whose_answer_comes_from_execution(generator):
    task = generator.validate(
        price_plan(generator),
        reply(
            "What was the closing price of MSFT on 2024-06-03?",
            ("get_stock_price", {"ticker": "MSFT", "date": "2024-06-03"}),
        ),
    )
    result = generator.servers.run(task.tool_sequence)[-1].text
    assert task.expected_answer == answer_from_result(result, "close")
    assert (task.answer_match, task.complexity, task.user_prompt) == (
        "numeric",
        "single",
        "What was the closing price of MSFT on 2024-06-03?",
    )
    assert task.tool_sequence == [ToolStep(1, "market", "get_stock_price", {"ticker": "MSFT", "date": "2024-06-03"})]
    validate_row(task.to_row())


def test_arguments_are_coerced_to_the_schema(generator):
    plan = TaskPlan(0, "single", (("search", "web_search"),), {}, ())
    task = generator.validate(
        plan,
        reply(
            "Find the Helix Robotics investor page URL.",
            ("web_search", {"query": "Helix Robotics investor relations", "max_results": "1"}),
            answer_field="results.0.url",
        ),
    )
    assert task.tool_sequence[0].params == {"query": "Helix Robotics investor relations", "max_results": 1}
    assert task.expected_answer == "https://helix-robotics.example/investors"


@pytest.mark.parametrize(
    ("question", "calls", "answer_field", "reason"),
    [
        (
            "What was the price of ZZZZ on 2024-06-03?",
            [("get_stock_price", {"ticker": "ZZZZ", "date": "2024-06-03"})],
            "close",
            "tool_error",
        ),
        (
            "What was the closing price of MSFT?",
            [("get_stock_price", {"ticker": "MSFT", "date": "2024-06-03"})],
            "close",
            "ungrounded_argument",
        ),
        (
            "What was the closing price of AAPL on 2024-03-15?",
            [("get_stock_price", {"ticker": "AAPL", "date": "2024-03-15"})],
            "close",
            "copied_example",
        ),
        ("What is the weather in Oslo today?", [("get_weather", {"city": "Oslo"})], "temp", "unknown_tool"),
        (
            "What was the closing price of MSFT?",
            [("get_stock_price", {"ticker": "MSFT"})],
            "close",
            "invalid_arguments",
        ),
        (
            "What was the MSFT price on 2024-06-03?",
            [("get_stock_price", {"ticker": "MSFT", "date": "2024-06-03"})],
            "mood",
            "no_answer",
        ),
        (
            "What was the MSFT price on 2024-06-03?",
            [("get_stock_price", {"ticker": "MSFT", "date": "2024-06-03", "exchange": "NYSE"})],
            "close",
            "invalid_arguments",
        ),
        ("What was the MSFT price on 2024-06-03?", [], "close", "wrong_call_count"),
    ],
)
def test_bad_replies_are_rejected_with_their_reason(generator, question, calls, answer_field, reason):
    with pytest.raises(Rejected) as info:
        generator.validate(price_plan(generator), reply(question, *calls, answer_field=answer_field))
    assert info.value.reason == reason


def test_the_answer_is_the_field_the_question_asks_for(generator):
    # The model named "close", but the question asks for the opening price: the answer is the executed "open".
    call = ("get_stock_price", {"ticker": "JPM", "date": "2024-06-03"})
    task = generator.validate(price_plan(generator), reply("What was the opening price of JPM on 2024-06-03?", call))
    result = generator.servers.run(task.tool_sequence)[-1].text
    assert task.expected_answer == answer_from_result(result, "open")


def test_a_missing_answer_field_is_found_from_the_question(generator):
    plan = TaskPlan(0, "single", (("market", "get_company_profile"),), {"ticker": "WMT"}, ())
    text = '{"question": "How many employees does WMT have?", "calls": [{"tool": "get_company_profile", "arguments": {"ticker": "WMT"}}]}'
    assert generator.validate(plan, text).expected_answer == "2100000"


def test_the_models_field_answers_a_question_that_names_no_field(generator):
    call = ("get_stock_price", {"ticker": "KO", "date": "2024-06-03"})
    task = generator.validate(price_plan(generator), reply("What is the price of KO on 2024-06-03?", call))
    result = generator.servers.run(task.tool_sequence)[-1].text
    assert task.expected_answer == answer_from_result(result, "close")


def test_an_answer_field_other_than_the_fields_the_question_names_is_rejected(generator):
    call = ("get_stock_price", {"ticker": "WMT", "date": "2024-06-03"})
    with pytest.raises(Rejected) as info:
        generator.validate(price_plan(generator), reply("What were the high and low of WMT on 2024-06-03?", call))
    assert info.value.reason == "answer_not_asked"


def test_a_call_with_wrong_arguments_in_a_broken_reply_is_invalid_arguments():
    text = '{"question": "What is the price of MSFT?", "calls": [{"tool": "get_stock_price", "arguments": {"ticker": "MSFT"}}, "answer_field": "close"'
    with pytest.raises(Rejected) as info:
        parse_reply(text, [PRICE_TOOL])
    assert info.value.reason == "invalid_arguments"


def test_the_same_task_twice_is_a_duplicate(generator):
    text = reply(
        "What was the opening price of MSFT on 2024-06-03?",
        ("get_stock_price", {"ticker": "MSFT", "date": "2024-06-03"}),
        answer_field="open",
    )
    generator.validate(price_plan(generator), text)
    with pytest.raises(Rejected) as info:
        generator.validate(price_plan(generator), text)
    assert info.value.reason == "duplicate"


def test_repeated_call_counts_once(generator):
    call = ("get_stock_price", {"ticker": "TSLA", "date": "2024-06-03"})
    task = generator.validate(price_plan(generator), reply("TSLA close on 2024-06-03, please.", call, call))
    assert len(task.tool_sequence) == 1


def test_every_seed_task_is_valid_on_the_bundled_servers():
    config = LLMGenerationConfig(complexities=("single",))
    with LLMTaskGenerator(config) as generator:
        for seed in SEED_TASKS:
            steps = [ToolStep(i + 1, generator.tool_server[t], t, a) for i, (t, a) in enumerate(seed.calls)]
            results = generator.servers.run(steps)
            assert not results[-1].is_error, (seed.question, results[-1].text)
            generator._check_grounded(seed.question, steps, [r.text for r in results])
            assert answer_from_result(results[-1].text, seed.answer_field) is not None, seed.question
