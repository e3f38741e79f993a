"""Success per template and entity split across eval steps, and its markdown report beside the rule baseline."""

from __future__ import annotations

import json

import pytest

from skyrl_integrations.analysis.cli import main
from skyrl_integrations.analysis.dumps import DumpError, load_eval_dumps
from skyrl_integrations.analysis.splits import format_markdown, success_by_split

BASELINE = {
    "rules": 110,
    "rows": 6,
    "templates": {
        "price_field": {
            "unseen": {"rule": "get_stock_price, follow errors, answer low", "success": 0.5, "questions": 2},
            "seen": {"rule": "get_stock_price, follow errors, answer close", "success": 1.0, "questions": 1},
        },
        "financial_field": {"unseen": {"rule": "get_financials, ...", "success": 0.0, "questions": 1}},
    },
    "overall": {
        "unseen": {
            "rule": "get_stock_price, follow errors, answer low",
            "success": 0.25,
            "questions": 3,
            "per_template": {"price_field": 0.5, "financial_field": 0.0},
        },
        "seen": {
            "rule": "get_stock_price, follow errors, answer close",
            "success": 1.0,
            "questions": 1,
            "per_template": {"price_field": 1.0},
        },
    },
}


QUESTIONS = [("q0", "price_field", "unseen"), ("q1", "price_field", "unseen")]
QUESTIONS += [("q2", "financial_field", "unseen"), ("q3", "price_field", "seen")]
"""Four questions: price_field x2 and financial_field x1 unseen, price_field x1 seen."""


@pytest.fixture
def export(tmp_path, make_row, write_dump):
    """Steps 0 and 18 of `QUESTIONS`."""

    def step(folder, scores):
        rows = [
            make_row(
                score,
                instance=instance,
                env_extras={"extra_info": {"template": template, "entity_split": split}},
                env_metrics={"success": bool(score)},
            )
            for (instance, template, split), score in zip(QUESTIONS, scores, strict=True)
        ]
        write_dump(tmp_path / "dumped_evals" / folder, {"market": rows})

    step("global_step_0_evals", [0.0, 0.0, 0.0, 1.0])
    step("global_step_18_evals", [1.0, 0.0, 1.0, 1.0])
    return tmp_path


def test_success_per_template_and_split_at_each_step(export):
    table = success_by_split(load_eval_dumps(str(export)))
    assert table == {
        "financial_field": {"unseen": {"questions": 1, "steps": {"0": 0.0, "18": 1.0}}},
        "price_field": {
            "seen": {"questions": 1, "steps": {"0": 1.0, "18": 1.0}},
            "unseen": {"questions": 2, "steps": {"0": 0.0, "18": 0.5}},
        },
        "overall": {
            "seen": {"questions": 1, "steps": {"0": 1.0, "18": 1.0}},
            "unseen": {"questions": 3, "steps": {"0": 0.0, "18": 2 / 3}},
        },
    }


def test_rows_without_entity_splits_are_grouped_by_data_source_under_all(tmp_path, make_row, write_dump):
    write_dump(tmp_path / "global_step_0_evals", {"env_a": [make_row(1.0)]})
    assert success_by_split(load_eval_dumps(str(tmp_path))) == {
        "env_a": {"all": {"questions": 1, "steps": {"0": 1.0}}},
        "overall": {"all": {"questions": 1, "steps": {"0": 1.0}}},
    }


def test_the_markdown_puts_each_group_beside_its_best_rule_and_the_best_single_rule(export):
    markdown = format_markdown(success_by_split(load_eval_dumps(str(export))), BASELINE)
    rows = [line for line in markdown.splitlines() if line.startswith("| ")]
    assert rows == [
        "| template | split | questions | step 0 | step 18 | change | best rule for it | best single rule |",
        "| financial_field | unseen | 1 | 0.000 | 1.000 | +1.000 | 0.000 | 0.000 |",
        "| price_field | seen | 1 | 1.000 | 1.000 | +0.000 | 1.000 | 1.000 |",
        "| price_field | unseen | 2 | 0.000 | 0.500 | +0.500 | 0.500 | 0.500 |",
        "| overall | seen | 1 | 1.000 | 1.000 | +0.000 | 1.000 | 1.000 |",
        "| overall | unseen | 3 | 0.000 | 0.667 | +0.667 | 0.250 | 0.250 |",
    ]
    assert "Best single rule [unseen]: get_stock_price, follow errors, answer low (0.250)." in markdown


def test_the_markdown_without_a_baseline_has_no_rule_columns(export):
    markdown = format_markdown(success_by_split(load_eval_dumps(str(export))))
    assert "| template | split | questions | step 0 | step 18 | change |" in markdown
    assert "rule" not in markdown


def test_the_change_starts_after_the_base_model(export, make_row, write_dump):
    """With a warm start the base model's eval comes first; `change` is the last eval minus step 0, RL's own change."""
    base_rows = [
        make_row(1.0, instance=instance, env_extras={"extra_info": {"template": template, "entity_split": split}})
        for instance, template, split in QUESTIONS
    ]
    write_dump(export / "dumped_evals" / "base_evals", {"market": base_rows})
    markdown = format_markdown(success_by_split(load_eval_dumps(str(export))))
    rows = [line for line in markdown.splitlines() if line.startswith("| ")]
    assert rows[0] == "| template | split | questions | base | step 0 | step 18 | change |"
    assert "| price_field | unseen | 2 | 1.000 | 0.000 | 0.500 | +0.500 |" in rows
    assert "| overall | unseen | 3 | 1.000 | 0.000 | 0.667 | +0.667 |" in rows


def test_cli_writes_the_markdown_with_the_baseline(export, tmp_path):
    (tmp_path / "baseline.json").write_text(json.dumps(BASELINE))
    out = tmp_path / "held_out.md"
    assert main([str(export), "--markdown", str(out), "--rule-baseline", str(tmp_path / "baseline.json")]) == 0
    assert "| overall | unseen | 3 | 0.000 | 0.667 | +0.667 | 0.250 | 0.250 |" in out.read_text()


def test_cli_refuses_a_baseline_without_the_markdown_report(export, tmp_path, capsys):
    assert main([str(export), "--rule-baseline", str(tmp_path / "baseline.json")]) == 1
    assert "--rule-baseline is shown in --markdown's report; give --markdown" in capsys.readouterr().err


def test_cli_names_an_unreadable_baseline(export, tmp_path, capsys):
    (tmp_path / "baseline.json").write_text("{not json")
    args = [str(export), "--markdown", str(tmp_path / "m.md"), "--rule-baseline", str(tmp_path / "baseline.json")]
    assert main(args) == 1
    assert f"--rule-baseline {tmp_path / 'baseline.json'}: Expecting property name" in capsys.readouterr().err


def test_a_dump_whose_extra_info_is_not_an_object_is_refused_naming_the_line(tmp_path, make_row, write_dump):
    write_dump(tmp_path / "global_step_0_evals", {"env_a": [make_row(1.0, env_extras={"extra_info": "x"})]})
    with pytest.raises(DumpError, match=r"env_a.jsonl:1: 'env_extras.extra_info' must be an object or null"):
        load_eval_dumps(str(tmp_path))
