"""`skyrl-analyze-evals`: the terminal table, the JSON summary, the HTML report, step comparison and errors."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from skyrl_integrations.analysis.cli import main


@pytest.fixture
def two_steps(tmp_path, make_row, write_dump):
    """An export folder with steps 0 and 40; env_a: 2 prompts x 2 samples, env_b: 1 prompt x 2 samples."""

    def step(folder, a_scores, b_scores):
        env_a = [
            make_row(score, ("assistant", "call"), ("tool", "404 Not Found"), ("assistant", "I have completed it."))
            | {"trajectory_id": {"instance_id": f"a{i // 2}", "repetition_id": i % 2}, "tool_calls": 1}
            for i, score in enumerate(a_scores)
        ]
        env_b = [
            make_row(score, data_source="env_b", stop_reason="length", instance="b0", repetition=i)
            for i, score in enumerate(b_scores)
        ]
        write_dump(tmp_path / "dumped_evals" / folder, {"env_a": env_a, "env_b": env_b})

    step("global_step_0_evals", [0.0, 0.0, 1.0, 0.0], [0.0, 0.0])
    step("global_step_40_evals", [1.0, 0.0, 1.0, 1.0], [1.0, 0.0])
    return tmp_path


def test_prints_a_table_per_step_with_environments_and_overall(two_steps, capsys):
    assert main([str(two_steps), "--step", "40"]) == 0
    out = capsys.readouterr().out
    assert "== step 40: 6 trajectories ==" in out
    rows = {
        line.split()[0]: line.split()[1:] for line in out.splitlines() if re.match(r"^(env_a|env_b|overall) ", line)
    }
    # traj, prompts, pass@1, pass@2, pass^1, pass^2, any, mean score, turns, tool calls
    # (pass^2: only a1 has both samples solved; a0 and b0 have one of two)
    assert rows == {
        "env_a": ["4", "2", "0.750", "1.000", "0.750", "0.500", "1.000", "0.750", "2.00", "1.00"],
        "env_b": ["2", "1", "0.500", "1.000", "0.500", "0.000", "1.000", "0.500", "1.00", "-"],
        "overall": ["6", "3", "0.667", "1.000", "0.667", "0.333", "1.000", "0.667", "1.67", "1.00"],
    }
    assert "stop reasons: stop 4, length 2" in out


def test_the_json_summary_has_each_step_and_the_comparison(two_steps, tmp_path):
    out = tmp_path / "summary.json"
    assert main([str(two_steps), "--step", "0", "--step", "40", "--json", str(out)]) == 0
    summary = json.loads(out.read_text())
    assert list(summary["steps"]) == ["0", "40"]
    assert summary["steps"]["0"]["env_a"]["failure_categories"]["resource_not_found"]["count"] == 4
    assert summary["steps"]["0"]["env_a"]["failure_categories"]["false_completion"]["count"] == 3
    assert summary["steps"]["0"]["env_b"]["failure_categories"]["context_overflow"]["count"] == 2
    assert (summary["comparison"]["from"], summary["comparison"]["to"]) == ("0", "40")
    assert summary["comparison"]["groups"]["env_a"]["pass_at_1"] == {"from": 0.25, "to": 0.75, "delta": 0.5}
    assert summary["comparison"]["groups"]["env_b"]["any_success"] == {"from": 0.0, "to": 1.0, "delta": 1.0}


def test_the_comparison_is_printed_with_deltas(two_steps, capsys):
    assert main([str(two_steps), "--step", "0", "--step", "40"]) == 0
    out = capsys.readouterr().out
    assert "== step 0 -> 40 ==" in out
    assert re.search(r"env_a\s+pass_at_1\s+0\.250\s+0\.750\s+\+0\.500", out)


def test_the_html_report_is_self_contained_with_plots(two_steps, tmp_path):
    out = tmp_path / "report.html"
    assert main([str(two_steps), "--html", str(out)]) == 0
    page = out.read_text()
    assert page.count("src='data:image/png;base64,") == 4  # success, turns, stop reasons, categories
    assert not re.search(r"(src|href)=['\"]https?:", page)
    assert "I have completed it." in page  # a false-completion example


def test_success_threshold_changes_what_counts_as_success(tmp_path, make_row, write_dump, capsys):
    write_dump(tmp_path, {"env_a": [make_row([0.1, 0.2])]})
    main([str(tmp_path), "--success-threshold", "0.5"])
    assert re.search(r"^overall\s+1\s+1\s+0\.000", capsys.readouterr().out, re.MULTILINE)


def test_an_unknown_step_is_an_error_naming_the_steps_found(two_steps, capsys):
    assert main([str(two_steps), "--step", "7"]) == 1
    assert "step(s) 7 not in" in capsys.readouterr().err


def test_a_bad_row_is_an_error_naming_file_and_line(tmp_path, capsys):
    (tmp_path / "env_a.jsonl").write_text('{"input_prompt": "q", "output_response": "a"}\n')
    assert main([str(tmp_path)]) == 1
    assert "env_a.jsonl:1: missing key(s) score" in capsys.readouterr().err


def test_the_console_script_is_installed(two_steps):
    script = Path(sys.executable).parent / "skyrl-analyze-evals"  # the venv's bin folder
    assert script.is_file()
    result = subprocess.run([str(script), str(two_steps), "--step", "0"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "== step 0: 6 trajectories ==" in result.stdout
