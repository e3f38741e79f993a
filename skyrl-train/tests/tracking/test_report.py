"""Run report from a hand-written metrics.jsonl: plots, summary numbers, missing keys, the CLI."""

import json

from skyrl_train.tracking.report import main, write_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# Eval before training (step 0) and after step 3; three training steps with every plotted family.
LINES = [
    {"step": 0, "timestamp": 100.0, "eval/all/avg_score": 0.2, "eval/gsm8k/avg_score": 0.3, "eval/mcp/avg_score": 0.1},
    *[
        {
            "step": s,
            "timestamp": 100.0 + 10 * s,
            "reward/avg_raw_reward": r,
            "reward/avg_pass_at_4": p,
            "generate/avg_num_tokens": n,
            "policy/policy_kl": kl,
            "timing/step": 10.0,
            "timing/generate": 6.0,
            "timing/generate_tokens_per_s": 50.0 * s,
            "memory/peak_rss_gb": peak,
            "memory/rss_gb": rss,
        }
        for s, r, p, n, kl, peak, rss in [
            (1, 0.1, 0.25, 120, 0.0, 3.1, 2.5),
            (2, 0.4, 0.5, 100, 0.01, 3.4, 2.6),
            (3, 0.3, 0.75, 90, 0.02, 3.2, 2.7),
        ]
    ],
    {"step": 3, "timestamp": 135.0, "eval/all/avg_score": 0.45, "eval/gsm8k/avg_score": 0.6, "eval/mcp/avg_score": 0.3},
]


def _write(path, lines, tail=""):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines) + tail)
    return path


def test_every_plot_family_is_written_as_a_png(tmp_path):
    write_report(_write(tmp_path / "metrics.jsonl", LINES), tmp_path / "report")
    expected = ["eval_score", "kl", "memory", "response_length", "reward", "throughput", "timing"]
    assert sorted(p.stem for p in (tmp_path / "report").glob("*.png")) == expected
    for name in expected:
        data = (tmp_path / "report" / f"{name}.png").read_bytes()
        assert data.startswith(PNG_SIGNATURE) and len(data) > 5000


def test_summary_has_steps_time_main_metrics_and_eval_before_after(tmp_path):
    summary = write_report(_write(tmp_path / "metrics.jsonl", LINES), tmp_path / "report")
    assert summary["steps_run"] == 3
    assert summary["total_time_s"] == {"wall_clock": 35.0, "sum_of_timing_step": 30.0}
    assert summary["main_metrics"]["reward/avg_raw_reward"] == {
        "first": {"step": 1, "value": 0.1},
        "last": {"step": 3, "value": 0.3},
        "best": {"step": 2, "value": 0.4, "direction": "max"},
    }
    assert [(e["data_source"], e["before"]["value"], e["after"]["value"]) for e in summary["eval_before_after"]] == [
        ("all", 0.2, 0.45),
        ("gsm8k", 0.3, 0.6),
        ("mcp", 0.1, 0.3),
    ]
    assert json.loads((tmp_path / "report" / "summary.json").read_text()) == summary


def test_summary_markdown_shows_eval_before_and_after_per_data_source(tmp_path):
    write_report(_write(tmp_path / "metrics.jsonl", LINES), tmp_path / "report")
    markdown = (tmp_path / "report" / "summary.md").read_text()
    assert "- Steps run: 3 (steps 1 to 3)" in markdown
    assert "| gsm8k | avg_score | 0.3 (step 0) | 0.6 (step 3) | +0.3 |" in markdown
    assert "| mcp | avg_score | 0.1 (step 0) | 0.3 (step 3) | +0.2 |" in markdown
    assert "| `reward/avg_raw_reward` | 0.1 (step 1) | 0.3 (step 3) | 0.4 (step 2), max |" in markdown


def test_after_a_warm_start_the_eval_table_shows_the_base_model_too(tmp_path):
    base = {
        "step": 0,
        "eval_base/all/avg_score": 0.05,
        "eval_base/gsm8k/avg_score": 0.1,
        "eval_base/mcp/avg_score": 0.0,
    }
    summary = write_report(_write(tmp_path / "metrics.jsonl", [base, *LINES]), tmp_path / "report")
    assert [(e["data_source"], e["base"]["value"], e["before"]["value"]) for e in summary["eval_before_after"]] == [
        ("all", 0.05, 0.2),
        ("gsm8k", 0.1, 0.3),
        ("mcp", 0.0, 0.1),
    ]
    markdown = (tmp_path / "report" / "summary.md").read_text()
    assert "| data source | metric | base | before | after | change |" in markdown
    assert "| gsm8k | avg_score | 0.1 (step 0) | 0.3 (step 0) | 0.6 (step 3) | +0.3 |" in markdown


def test_summary_shows_the_highest_step_peak_rss_and_the_rss_after_the_first_and_last_steps(tmp_path):
    summary = write_report(_write(tmp_path / "metrics.jsonl", LINES), tmp_path / "report")
    assert summary["memory"] == {
        "peak_rss_gb": {"step": 2, "value": 3.4},
        "rss_gb_first": {"step": 1, "value": 2.5},
        "rss_gb_last": {"step": 3, "value": 2.7},
    }
    markdown = (tmp_path / "report" / "summary.md").read_text()
    assert (
        "- Peak RSS: 3.4 GB (step 2; `memory/peak_rss_gb`); RSS after a step: 2.5 (step 1) first, 2.7 (step 3) last"
    ) in markdown


def test_a_run_without_memory_metrics_has_no_peak_rss_line(tmp_path):
    lines = [{k: v for k, v in line.items() if not k.startswith("memory/")} for line in LINES]
    summary = write_report(_write(tmp_path / "metrics.jsonl", lines), tmp_path / "report")
    assert summary["memory"] is None
    assert "Peak RSS" not in (tmp_path / "report" / "summary.md").read_text()


def test_missing_keys_skip_their_plots_with_a_note(tmp_path):
    lines = [{"step": s, "timestamp": float(s), "reward/avg_raw_reward": 0.1 * s} for s in (1, 2)]
    summary = write_report(_write(tmp_path / "metrics.jsonl", lines), tmp_path / "report")
    assert summary["plots"] == ["reward"]
    assert [p.name for p in (tmp_path / "report").glob("*.png")] == ["reward.png"]
    assert any("'eval_score' skipped" in note for note in summary["notes"])
    assert summary["eval_before_after"] == []
    assert "No eval metrics found." in (tmp_path / "report" / "summary.md").read_text()


def test_a_truncated_last_line_and_null_values_do_not_break_the_report(tmp_path):
    lines = [
        {"step": 1, "reward/avg_raw_reward": None},
        {"step": 2, "reward/avg_raw_reward": 0.5},
        {"step": 3, "reward/avg_raw_reward": 0.25},
    ]
    summary = write_report(_write(tmp_path / "metrics.jsonl", lines, tail='{"step": 4, "rew'), tmp_path / "report")
    assert summary["notes"][0] == "skipped 1 unreadable line(s) of metrics.jsonl: [4]"
    assert summary["main_metrics"]["reward/avg_raw_reward"] == {
        "first": {"step": 1, "value": None},
        "last": {"step": 3, "value": 0.25},
        "best": {"step": 2, "value": 0.5, "direction": "max"},
    }


def test_cli_writes_the_report_into_the_run_folder(tmp_path, capsys):
    _write(tmp_path / "metrics.jsonl", LINES)
    assert main([str(tmp_path)]) == 0
    assert (tmp_path / "report" / "summary.md").is_file()
    assert capsys.readouterr().out == f"report for 3 steps written to {tmp_path / 'report'} (7 plots)\n"


def test_cli_without_a_metrics_file_fails_with_a_message(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert "metrics.jsonl not found" in capsys.readouterr().err


def test_cli_accepts_the_metrics_file_itself_and_an_out_folder(tmp_path):
    _write(tmp_path / "metrics.jsonl", LINES)
    assert main([str(tmp_path / "metrics.jsonl"), "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "reward.png").is_file()


def test_summary_has_each_eval_metric_per_data_source_at_every_eval_step(tmp_path):
    lines = [
        {"step": 0, "timestamp": 1.0, "eval/all/pass_at_1": 0.25, "eval/a/pass_at_1": 0.5, "eval/b/pass_at_1": 0.0},
        {"step": 2, "timestamp": 2.0, "eval/all/pass_at_1": 0.5, "eval/a/pass_at_1": 0.5, "eval/b/pass_at_1": 0.5},
        {"step": 4, "timestamp": 3.0, "eval/all/pass_at_1": 0.75, "eval/a/pass_at_1": 1.0},
    ]
    summary = write_report(_write(tmp_path / "metrics.jsonl", lines), tmp_path / "report")
    assert summary["eval_curves"] == {
        "pass_at_1": {
            "steps": [0, 2, 4],
            "data_sources": {"a": [0.5, 0.5, 1.0], "all": [0.25, 0.5, 0.75], "b": [0.0, 0.5, None]},
        }
    }
    markdown = (tmp_path / "report" / "summary.md").read_text()
    assert "## Eval `pass_at_1` over training\n\n| step | a | all | b |\n|---|---|---|---|\n" in markdown
    assert "| 0 | 0.5 | 0.25 | 0 |\n| 2 | 0.5 | 0.5 | 0.5 |\n| 4 | 1 | 0.75 | n/a |\n" in markdown


def test_two_evals_give_no_curve_table(tmp_path):
    write_report(_write(tmp_path / "metrics.jsonl", LINES), tmp_path / "report")
    assert "over training" not in (tmp_path / "report" / "summary.md").read_text()
