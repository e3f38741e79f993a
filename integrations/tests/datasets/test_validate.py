"""The validator CLI: per-file counts, every problem listed with file/row/key, exit status, --execute replay."""

from __future__ import annotations

import json
import subprocess
import sys

from skyrl_integrations.datasets.io import write_dataset
from skyrl_integrations.datasets.schema import ToolStep
from skyrl_integrations.datasets.validate import main, validate_files


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_valid_dataset_prints_counts_and_exits_0(make_task, tmp_path, capsys):
    tasks = [make_task("market-0001"), make_task("market-0002", complexity=None)]
    tasks.append(
        make_task(
            "search-0001",
            tool_sequence=[ToolStep(1, "search", "web_search", {"query": "Helix Robotics headquarters"})],
            expected_answer="Austin",
            answer_match="contains",
        )
    )
    write_dataset(tasks, tmp_path, val_ratio=0.0)
    assert main([str(tmp_path / "train.parquet"), str(tmp_path / "validation.jsonl")]) == 0
    assert capsys.readouterr().out == (
        f"{tmp_path}/train.parquet: 3 row(s), OK\n"
        "  data_source: mcp/market 2, mcp/search 1\n"
        "  complexity: single 3\n"
        "  split: train 3\n"
        f"{tmp_path}/validation.jsonl: 0 row(s), OK\n"
    )


def test_every_problem_is_listed_with_file_row_and_key(make_task, tmp_path, capsys):
    bad_env = make_task("market-0002").to_row()
    bad_env["env_class"] = "gsm8k"
    bad_prompt = make_task("market-0003").to_row()
    bad_prompt["prompt"].append({"role": "user", "content": "and also"})
    path = write_jsonl(tmp_path / "tasks.jsonl", [make_task().to_row(), bad_env, bad_prompt])
    assert main([path]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"{path}: 3 row(s), 2 invalid row(s)\n")
    assert out.endswith(
        "\n2 problem(s):\n"
        f"  {path}: row 1: field 'env_class': expected 'mcp_tool', got 'gsm8k'\n"
        f"  {path}: row 2: field 'prompt': expected a compact prompt with roles ['system', 'user'], got roles "
        "['system', 'user', 'user']\n"
    )


def test_row_of_the_wrong_split_is_reported(make_task, tmp_path):
    path = write_jsonl(tmp_path / "validation.jsonl", [make_task(split="train").to_row()])
    (report,) = validate_files([path])
    assert [(p.row, p.field, p.message) for p in report.problems] == [
        (0, "extra_info.split", "row of split 'train' in a 'validation' file")
    ]


def test_duplicate_task_ids_are_reported(make_task, tmp_path):
    path = write_jsonl(tmp_path / "tasks.jsonl", [make_task().to_row(), make_task().to_row()])
    (report,) = validate_files([path])
    assert [(p.row, p.field, p.message) for p in report.problems] == [
        (1, "reward_spec.ground_truth.task_id", "duplicate task_id 'market-0001' (also row 0)")
    ]


def test_unreadable_file_is_a_problem_not_a_crash(tmp_path, capsys):
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"prompt": []}\n{not json\n')
    assert main([str(path)]) == 1
    assert "line 2 is not valid JSON" in capsys.readouterr().out


def test_execute_accepts_a_task_whose_answer_the_tools_return(make_task, tmp_path):
    path = write_jsonl(tmp_path / "tasks.jsonl", [make_task().to_row()])
    (report,) = validate_files([path], execute=True)
    assert report.problems == []


def test_execute_reports_an_answer_the_tools_do_not_return(make_task, tmp_path):
    path = write_jsonl(tmp_path / "tasks.jsonl", [make_task(expected_answer="187.23").to_row()])
    (report,) = validate_files([path], execute=True)
    assert [(p.row, p.field, p.message) for p in report.problems] == [
        (
            0,
            "reward_spec.ground_truth.success.expected_answer",
            "'187.23' (numeric) is not derivable from the replayed results",
        )
    ]


def test_execute_reports_a_failing_call(make_task, tmp_path):
    steps = [ToolStep(1, "market", "get_stock_price", {"ticker": "ZZZZ", "date": "2024-03-15"})]
    path = write_jsonl(tmp_path / "tasks.jsonl", [make_task(tool_sequence=steps).to_row()])
    (report,) = validate_files([path], execute=True)
    ((row, key, message),) = [(p.row, p.field, p.message) for p in report.problems]
    assert (row, key) == (0, "reward_spec.ground_truth.tool_sequence[0]")
    assert message.startswith("get_stock_price failed on replay (tool_error): ")
    assert message.endswith("Unknown ticker: search_tickers finds tickers by company name")


def test_execute_reports_a_server_that_is_not_bundled(make_task, tmp_path):
    steps = [ToolStep(1, "weather", "forecast", {"city": "Oslo"})]
    path = write_jsonl(tmp_path / "tasks.jsonl", [make_task(tool_sequence=steps, answer_match="exact").to_row()])
    (report,) = validate_files([path], execute=True)
    assert [(p.field, p.message) for p in report.problems] == [
        (
            "reward_spec.ground_truth.tool_sequence[0].server",
            "'weather' is not a bundled server; --execute replays bundled servers only (market, python, search, "
            "slack)",
        )
    ]


def test_execute_accepts_a_computed_difference(make_task, tmp_path):
    steps = [
        ToolStep(1, "market", "get_stock_price", {"ticker": "AAPL", "date": "2024-03-15"}),
        ToolStep(2, "market", "get_stock_price", {"ticker": "HLXR", "date": "2024-03-15"}),
    ]
    task = make_task(tool_sequence=steps, expected_answer="138.82")  # 176.78 - 37.96
    path = write_jsonl(tmp_path / "tasks.jsonl", [task.to_row()])
    (report,) = validate_files([path], execute=True)
    assert (report.problems, report.replayed, report.unchecked) == ([], 1, 0)


def test_execute_skips_calls_without_their_free_text_arguments_and_says_so(make_task, tmp_path, capsys):
    steps = [ToolStep(1, "search", "web_search", {}), ToolStep(2, "market", "get_company_profile", {"ticker": "HLXR"})]
    task = make_task(tool_sequence=steps, expected_answer="NASDAQ", answer_match="contains", max_servers=2)
    path = write_jsonl(tmp_path / "tasks.jsonl", [task.to_row()])
    assert main([path, "--execute"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "  execute: 1 row(s) replayed; 1 with calls whose params leave out required (free-text) arguments: those "
        "calls were skipped and the answer was not checked"
    )


def test_module_runs_as_a_command(make_task, tmp_path):
    path = write_jsonl(tmp_path / "tasks.jsonl", [make_task().to_row()])
    done = subprocess.run(
        [sys.executable, "-m", "skyrl_integrations.datasets.validate", path, "--execute"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stdout.splitlines()[0]) == (0, f"{path}: 1 row(s), OK")
