"""Eval dump rows: upstream's fields, the structured fields where something reports them, and no secrets."""

from __future__ import annotations

import json

from skyrl_gym import InfraFailure, InfraFailureReason
from skyrl_train.evaluate import dump_eval_results
from skyrl_train.generators.base import GeneratorOutput, TrajectoryConversation, TrajectoryID
from skyrl_train.testing import tiny_model, tiny_tokenizer  # noqa: F401
from skyrl_train.trainer_utils import Rollouts

UPSTREAM_FIELDS = ["input_prompt", "output_response", "score", "stop_reason", "env_class", "env_extras", "data_source"]
FAKE_KEY = "sk-test-0123456789abcdef"  # pragma: allowlist secret


def one_row_output(tokenizer, response: str = "It is 4.", **fields) -> GeneratorOutput:
    output = GeneratorOutput(
        prompt_token_ids=[tokenizer.encode("What is 2+2?", add_special_tokens=False)],
        response_ids=[tokenizer.encode(response, add_special_tokens=False)],
        rewards=[[0.0, 1.0]],
        loss_masks=[[1, 1]],
        stop_reasons=["stop"],
        trajectory_ids=[TrajectoryID("7", 1)],
        env_metrics=[{}],
    )
    output.update(fields)
    return output


def dump_one(tmp_path, tokenizer, output, env_extras=None):
    """Dump a one-row output of data source "arith" and return (the parsed row, the file's raw text)."""
    extras = {"data_source": "arith", **(env_extras or {})}
    dump_eval_results(tmp_path, Rollouts(output, ["7"], ["gsm8k"], [extras]), tokenizer, {})
    text = (tmp_path / "arith.jsonl").read_text()
    return json.loads(text), text


def test_rows_keep_upstream_fields_in_order(tmp_path, tiny_tokenizer):  # noqa: F811
    row, _ = dump_one(tmp_path, tiny_tokenizer, one_row_output(tiny_tokenizer))
    assert list(row)[:7] == UPSTREAM_FIELDS
    assert [row[key] for key in UPSTREAM_FIELDS] == [
        "What is 2+2?",
        "It is 4.",
        [0.0, 1.0],
        "stop",
        "gsm8k",
        {"data_source": "arith"},
        "arith",
    ]


def test_files_are_one_per_data_source_plus_aggregated_results(tmp_path, tiny_tokenizer):  # noqa: F811
    output = one_row_output(tiny_tokenizer)
    dump_eval_results(
        tmp_path,
        Rollouts(output, ["7"], ["gsm8k"], [{"data_source": "a/b"}]),
        tiny_tokenizer,
        {"eval/all/pass_at_1": 1.0},
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_b.jsonl", "aggregated_results.jsonl"]
    assert json.loads((tmp_path / "aggregated_results.jsonl").read_text()) == {"eval/all/pass_at_1": 1.0}


def test_structured_fields_come_from_the_conversation_and_env_metrics(tmp_path, tiny_tokenizer):  # noqa: F811
    conversation = TrajectoryConversation(
        prompt=[{"role": "system", "content": "Use tools."}, {"role": "user", "content": "Find AAPL."}],
        response=[
            {"role": "assistant", "content": '{"name": "quote", "arguments": {"ticker": "AAPL"}}'},
            {"role": "tool", "content": "189.5"},
            {"role": "assistant", "content": "AAPL is 189.5"},
        ],
    )
    env_metrics = {"turns": 2, "tool_calls": 1, "tool_errors": 0, "parse_failures_json": 1, "parse_failures_tag": 0}
    row, _ = dump_one(
        tmp_path,
        tiny_tokenizer,
        one_row_output(tiny_tokenizer, conversations=[conversation], env_metrics=[env_metrics]),
    )
    assert {key: value for key, value in row.items() if key not in UPSTREAM_FIELDS} == {
        "trajectory_id": {"instance_id": "7", "repetition_id": 1},
        "messages": conversation.prompt + conversation.response,
        "num_prompt_messages": 2,
        "num_turns": 2,
        "tool_calls": 1,
        "parse_failures": {"json": 1, "tag": 0},
        "env_metrics": env_metrics,
    }


def test_fields_nothing_reports_are_left_out(tmp_path, tiny_tokenizer):  # noqa: F811
    output = one_row_output(tiny_tokenizer, env_metrics=[{"steps": 1}], trajectory_ids=None)
    row, _ = dump_one(tmp_path, tiny_tokenizer, output)
    assert list(row) == UPSTREAM_FIELDS + ["env_metrics"]


def test_num_turns_falls_back_to_the_envs_turns_metric(tmp_path, tiny_tokenizer):  # noqa: F811
    row, _ = dump_one(tmp_path, tiny_tokenizer, one_row_output(tiny_tokenizer, env_metrics=[{"turns": 3}]))
    assert row["num_turns"] == 3


def test_step_wise_rows_say_whether_they_are_the_last_step(tmp_path, tiny_tokenizer):  # noqa: F811
    row, _ = dump_one(tmp_path, tiny_tokenizer, one_row_output(tiny_tokenizer, is_last_step=[False]))
    assert row["is_last_step"] is False


def test_secret_env_values_are_scrubbed_from_every_dumped_string(tmp_path, tiny_tokenizer, monkeypatch):  # noqa: F811
    monkeypatch.setenv("ACME_API_KEY", FAKE_KEY)
    conversation = TrajectoryConversation(
        prompt=[{"role": "user", "content": "hi"}], response=[{"role": "tool", "content": f"401: bad key {FAKE_KEY}"}]
    )
    output = one_row_output(tiny_tokenizer, response=f"my key is {FAKE_KEY}", conversations=[conversation])
    row, text = dump_one(tmp_path, tiny_tokenizer, output, env_extras={"note": f"uses {FAKE_KEY}"})
    assert FAKE_KEY not in text
    assert row["output_response"] == "my key is <redacted>"
    assert row["messages"][1]["content"] == "401: bad key <redacted>"
    assert row["env_extras"]["note"] == "uses <redacted>"


def test_secret_named_extras_are_redacted(tmp_path, tiny_tokenizer):  # noqa: F811
    row, _ = dump_one(
        tmp_path, tiny_tokenizer, one_row_output(tiny_tokenizer), env_extras={"api_key": "abc", "task_key": "t1"}
    )
    assert row["env_extras"] == {"data_source": "arith", "api_key": "<redacted>", "task_key": "t1"}


def test_a_row_names_the_weight_version_that_generated_it(tmp_path, tiny_tokenizer):  # noqa: F811
    row, _ = dump_one(tmp_path, tiny_tokenizer, one_row_output(tiny_tokenizer, weight_versions=[12]))
    assert row["weight_version"] == 12


def test_an_unknown_weight_version_is_left_out(tmp_path, tiny_tokenizer):  # noqa: F811
    row, _ = dump_one(tmp_path, tiny_tokenizer, one_row_output(tiny_tokenizer, weight_versions=[None]))
    assert "weight_version" not in row


def test_a_row_carries_the_infrastructure_failure_its_trajectory_ended_in(tmp_path, tiny_tokenizer):  # noqa: F811
    failure = InfraFailure(InfraFailureReason.ENV_STEP_FAILED, "ConnectionError: tool server crashed")
    output = one_row_output(tiny_tokenizer, stop_reasons=["env_step_failed"], infra_failures=[failure])
    row, _ = dump_one(tmp_path, tiny_tokenizer, output)
    assert row["infra_failure"] == {"reason": "env_step_failed", "error": "ConnectionError: tool server crashed"}
