"""Reading dumps: the local layouts, upstream's rows, step-wise rows, and errors that name the bad row."""

from __future__ import annotations

import json

import pytest

from skyrl_gym import InfraFailure, InfraFailureReason
from skyrl_integrations.analysis import DumpError, load_eval_dumps

UPSTREAM_ROW = {
    "input_prompt": "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "output_response": "It is 5.<|im_end|>\n<|im_start|>user\nTry again.<|im_end|>\n<|im_start|>assistant\nIt is 4.<|im_end|>",
    "score": [0.0, 0.0, 1.0],
    "stop_reason": "stop",
    "env_class": "gsm8k_multi_turn",
    "env_extras": {"data_source": "gsm8k"},
    "data_source": "gsm8k",
}


def test_an_export_folder_gives_every_step_in_order(tmp_path, make_row, write_dump):
    """`base_evals/` (the model before a warm start) comes first."""
    for folder in ("global_step_100_evals", "eval_only", "global_step_40_evals", "base_evals", "global_step_0_evals"):
        write_dump(tmp_path / "dumped_evals" / folder, {"env_a": [make_row(1.0)]})
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n')  # the tracker's metrics file, not a dump
    assert list(load_eval_dumps(str(tmp_path))) == ["base", "0", "40", "100", "eval_only"]


def test_aggregated_results_are_not_read_as_trajectories(tmp_path, make_row, write_dump):
    write_dump(
        tmp_path / "global_step_0_evals", {"env_a": [make_row(1.0)], "env_b": [make_row(0.0, data_source="env_b")]}
    )
    (step,) = load_eval_dumps(str(tmp_path)).values()
    assert sorted(t.data_source for t in step) == ["env_a", "env_b"]


def test_the_s3_layout_mirrored_locally_is_read(tmp_path, make_row, write_dump):
    write_dump(tmp_path / "evals" / "run1" / "global_step_5", {"env_a": [make_row(1.0)]})
    assert list(load_eval_dumps(str(tmp_path / "evals" / "run1"))) == ["5"]


@pytest.mark.parametrize(("folder", "label"), [("global_step_7_evals", "7"), ("my_dump", "my_dump")])
def test_a_single_step_folder_is_one_step(tmp_path, make_row, write_dump, folder, label):
    write_dump(tmp_path / folder, {"env_a": [make_row(1.0)]})
    assert list(load_eval_dumps(str(tmp_path / folder))) == [label]


def test_upstream_rows_are_split_into_messages_at_chat_markers(tmp_path, write_dump):
    write_dump(tmp_path, {"gsm8k": [UPSTREAM_ROW]})
    (trajectory,) = load_eval_dumps(str(tmp_path))[tmp_path.name]
    assert trajectory.response == [
        {"role": "assistant", "content": "It is 5."},
        {"role": "user", "content": "Try again."},
        {"role": "assistant", "content": "It is 4."},
    ]
    assert (trajectory.num_turns, trajectory.tool_calls, trajectory.score) == (2, None, 1.0)
    assert (trajectory.trajectory_id, trajectory.prompt_key) == (None, UPSTREAM_ROW["input_prompt"])


def test_llama3_markers_are_understood(tmp_path, write_dump):
    row = dict(
        UPSTREAM_ROW,
        input_prompt="<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
        output_response="call<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n404 Not Found<|eot_id|>",
    )
    write_dump(tmp_path, {"gsm8k": [row]})
    (trajectory,) = load_eval_dumps(str(tmp_path))[tmp_path.name]
    assert trajectory.response == [
        {"role": "assistant", "content": "call"},
        {"role": "ipython", "content": "404 Not Found"},
    ]


def test_an_unknown_template_leaves_messages_and_turns_unknown(tmp_path, write_dump):
    write_dump(tmp_path, {"gsm8k": [dict(UPSTREAM_ROW, input_prompt="Q: 2+2?\nA:", output_response=" 4")]})
    (trajectory,) = load_eval_dumps(str(tmp_path))[tmp_path.name]
    assert (trajectory.response, trajectory.num_turns) == (None, None)


def test_step_wise_dumps_keep_each_trajectorys_last_step(tmp_path, make_row, write_dump):
    rows = [
        make_row(0.0, repetition=0, is_last_step=False),
        make_row(1.0, repetition=0, is_last_step=True),
        make_row(0.5, repetition=1),
        make_row(0.25, repetition=1),
    ]
    write_dump(tmp_path, {"env_a": rows})
    trajectories = load_eval_dumps(str(tmp_path))[tmp_path.name]
    assert sorted((t.trajectory_id, t.score) for t in trajectories) == [("p0_0", 1.0), ("p0_1", 0.25)]


def test_invalid_json_names_the_file_and_line(tmp_path, make_row):
    (tmp_path / "env_a.jsonl").write_text(json.dumps(make_row(1.0)) + "\n{not json\n")
    with pytest.raises(DumpError, match=r"env_a\.jsonl:2: not valid JSON"):
        load_eval_dumps(str(tmp_path))


def test_a_missing_required_key_is_named(tmp_path, make_row):
    row = make_row(1.0)
    del row["score"]
    (tmp_path / "env_a.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(DumpError, match=r"env_a\.jsonl:1: missing key\(s\) score"):
        load_eval_dumps(str(tmp_path))


def test_a_score_that_is_not_a_number_is_named(tmp_path, make_row):
    (tmp_path / "env_a.jsonl").write_text(json.dumps(make_row("high")) + "\n")
    with pytest.raises(DumpError, match=r"env_a\.jsonl:1: 'score' must be a number or a list of numbers"):
        load_eval_dumps(str(tmp_path))


def test_messages_without_their_prompt_length_are_rejected(tmp_path, make_row):
    row = make_row(1.0)
    del row["num_prompt_messages"]
    (tmp_path / "env_a.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(DumpError, match="num_prompt_messages"):
        load_eval_dumps(str(tmp_path))


def test_a_dumped_infrastructure_failure_is_read_as_its_typed_record(tmp_path, make_row, write_dump):
    failure = {"reason": "tool_server_failed", "error": "the tool server 'toy' stopped responding"}
    write_dump(tmp_path, {"env_a": [make_row(0.0, stop_reason="tool_server_failed", infra_failure=failure)]})
    (trajectory,) = load_eval_dumps(str(tmp_path))[tmp_path.name]
    assert trajectory.infra_failure == InfraFailure(InfraFailureReason.TOOL_SERVER_FAILED, failure["error"])


def test_an_infrastructure_failure_with_an_unknown_reason_is_named(tmp_path, make_row):
    row = make_row(0.0, infra_failure={"reason": "crashed", "error": "x"})
    (tmp_path / "env_a.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(DumpError, match=r"env_a\.jsonl:1: infra_failure\.reason: expected one of env_init_failed"):
        load_eval_dumps(str(tmp_path))


def test_a_folder_without_dumps_is_an_error(tmp_path, write_dump):
    write_dump(tmp_path / "global_step_0_evals", {})
    with pytest.raises(DumpError, match="no eval dump files"):
        load_eval_dumps(str(tmp_path))


def test_a_missing_folder_is_an_error(tmp_path):
    with pytest.raises(DumpError, match="is not a folder"):
        load_eval_dumps(str(tmp_path / "nope"))


def test_two_folders_of_one_step_are_an_error(tmp_path, make_row, write_dump):
    write_dump(tmp_path / "global_step_3", {"env_a": [make_row(1.0)]})
    write_dump(tmp_path / "global_step_3_evals", {"env_a": [make_row(1.0)]})
    with pytest.raises(DumpError, match="step 3 has two folders"):
        load_eval_dumps(str(tmp_path))
