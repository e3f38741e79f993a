"""`benchmarks/compare_runs.py` on two tiny synthetic output folders of examples/mcp/run_grpo.sh: what it calls
identical (exit 0), what it reports as a difference (exit 1) and how it names it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

EVAL_FILE = "exports/dumped_evals/global_step_2_evals/mcp_market_revenue.jsonl"
POLICY_FILE = "exports/global_step_2/policy/model.safetensors"


@pytest.fixture(scope="module")
def compare_runs(load_benchmark):
    with load_benchmark("compare_runs") as module:
        yield module


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def write_run(
    out: Path, loss_at_step_2: float = 0.25, step_2_seconds: float = 41.5, response: str = "Revenue: 42"
) -> Path:
    write_jsonl(out / "data/train.jsonl", [{"prompt": "What was ACME's revenue in 2024?", "answer": "42"}])
    write_jsonl(
        out / "exports/metrics.jsonl",
        [
            {"step": 1, "timestamp": 1.0, "policy/loss": 0.5, "reward/mean": 0.125, "timing/step": 40.0},
            {"step": 2, "timestamp": 2.0, "policy/loss": loss_at_step_2, "reward/mean": 0.375, "timing/step": 0.0},
            {"step": 2, "timing/step": step_2_seconds},
        ],
    )
    write_jsonl(
        out / EVAL_FILE,
        [{"trajectory_id": {"instance_id": 7, "repetition_id": 0}, "output_response": response, "score": 1.0}],
    )
    (out / POLICY_FILE).parent.mkdir(parents=True)
    save_file({"lm_head.weight": torch.tensor([[1.0, 2.0], [3.0, 4.0]])}, str(out / POLICY_FILE))
    return out


def run(compare_runs, capsys, a: Path, b: Path) -> tuple[int, str]:
    code = compare_runs.main([str(a), str(b)])
    return code, capsys.readouterr().out


def test_identical_folders_exit_0(compare_runs, capsys, tmp_path):
    code, out = run(compare_runs, capsys, write_run(tmp_path / "a"), write_run(tmp_path / "b"))
    assert code == 0
    assert "identical over 2 steps and 1 evals" in out


def test_a_metric_changed_at_step_2_exits_1_naming_step_and_key(compare_runs, capsys, tmp_path):
    a, b = write_run(tmp_path / "a"), write_run(tmp_path / "b", loss_at_step_2=0.25000001)
    code, out = run(compare_runs, capsys, a, b)
    assert code == 1
    assert "differences: 1; the first at step 2 (metric): policy/loss" in out


def test_a_timing_metric_changed_only_exits_0_and_shows_it_uncompared(compare_runs, capsys, tmp_path):
    a, b = write_run(tmp_path / "a"), write_run(tmp_path / "b", step_2_seconds=55.0)
    code, out = run(compare_runs, capsys, a, b)
    assert code == 0
    assert ["step", "2", "timing/step", "41.5", "55"] in [line.split() for line in out.splitlines()]


def test_one_eval_response_character_changed_exits_1_naming_the_data_source(compare_runs, capsys, tmp_path):
    a, b = write_run(tmp_path / "a"), write_run(tmp_path / "b", response="Revenue: 43")
    code, out = run(compare_runs, capsys, a, b)
    assert code == 1
    assert "differences: 1; the first at step 2 (eval-row): mcp_market_revenue[7_0].output_response" in out
    assert "common prefix: 10 chars, ...Revenue: 4" in out


def test_one_tensor_value_changed_exits_1_naming_the_tensor(compare_runs, capsys, tmp_path):
    a, b = write_run(tmp_path / "a"), write_run(tmp_path / "b")
    save_file({"lm_head.weight": torch.tensor([[1.0, 2.0], [3.0, 4.5]])}, str(b / POLICY_FILE))
    code, out = run(compare_runs, capsys, a, b)
    assert code == 1
    assert "differences: 1; the first at step 2 (export): policy/model.safetensors:lm_head.weight" in out
    assert "max|a-b|=0.5" in out


def test_a_policy_exported_by_one_run_only_exits_1_naming_the_step(compare_runs, capsys, tmp_path):
    a, b = write_run(tmp_path / "a"), write_run(tmp_path / "b")
    shutil.rmtree(b / "exports/global_step_2")
    code, out = run(compare_runs, capsys, a, b)
    assert code == 1
    assert "differences: 1; the first at step 2 (export): (policy exported)" in out


def test_a_folder_without_metrics_exits_2_naming_the_file(compare_runs, capsys, tmp_path):
    a, b = write_run(tmp_path / "a"), write_run(tmp_path / "b")
    (b / "exports/metrics.jsonl").unlink()
    assert compare_runs.main([str(a), str(b)]) == 2
    assert capsys.readouterr().err == f"compare_runs: no exports/metrics.jsonl under {b}\n"
