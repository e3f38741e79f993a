"""The CLI on dumps written by a real eval: `skyrl_train.evaluate` with the HF engine (tiny random model, SmolLM2
tokenizer) on the gsm8k_multi_turn env, at two steps."""

from __future__ import annotations

import json

import pytest

from skyrl_integrations.analysis.cli import main
from skyrl_train.config import load_config
from skyrl_train.evaluate import evaluate
from skyrl_train.generators import SkyRLGymGenerator
from skyrl_train.inference_engines.hf.engine import HFInferenceEngine
from skyrl_train.models import load_causal_lm
from skyrl_train.testing import tiny_model, tiny_tokenizer  # noqa: F401

QUESTIONS = {"0": ("Tom has 2 apples and buys 2 more. How many apples?", "4"), "1": ("What is 3 times 3?", "9")}


@pytest.fixture
async def export_folder(tmp_path, tiny_model, tiny_tokenizer):  # noqa: F811
    """`<export>/dumped_evals/global_step_{0,1}_evals/arith.jsonl`: 2 prompts x 2 samples, up to 2 turns of 8 tokens."""
    cfg = load_config(
        [
            "environment.env_class=gsm8k_multi_turn",
            "generator.max_turns=2",
            "generator.eval_n_samples_per_prompt=2",
            "generator.eval_sampling_params.max_generate_length=8",
            "generator.eval_sampling_params.temperature=1.0",
        ]
    )
    engine = HFInferenceEngine(load_causal_lm(tiny_model), tiny_tokenizer, seed=0)
    generator = SkyRLGymGenerator(cfg.generator, cfg.environment.skyrl_gym, engine, tiny_tokenizer)
    batch = {
        "prompt": [[{"role": "user", "content": question}] for question, _ in QUESTIONS.values()],
        "env_class": [None, None],
        "env_extras": [
            {"data_source": "arith", "reward_spec": {"ground_truth": answer}} for _, answer in QUESTIONS.values()
        ],
        "uid": list(QUESTIONS),
    }
    try:
        for step in (0, 1):
            dump_dir = tmp_path / "dumped_evals" / f"global_step_{step}_evals"
            await evaluate([batch], generator, cfg, step, tiny_tokenizer, dump_dir)
    finally:
        await engine.teardown()
    return tmp_path


def test_the_dump_rows_carry_the_structured_fields(export_folder):
    rows = [json.loads(line) for line in (export_folder / "dumped_evals/global_step_0_evals/arith.jsonl").open()]
    assert sorted((r["trajectory_id"]["instance_id"], r["trajectory_id"]["repetition_id"]) for r in rows) == [
        ("0", 0),
        ("0", 1),
        ("1", 0),
        ("1", 1),
    ]
    for row in rows:
        assert row["messages"][: row["num_prompt_messages"]] == [
            {"role": "user", "content": QUESTIONS[row["trajectory_id"]["instance_id"]][0]}
        ]
        assert row["num_turns"] == sum(m["role"] == "assistant" for m in row["messages"]) in (1, 2)
        assert row["env_metrics"]["steps"] == row["num_turns"]  # gsm8k_multi_turn counts its steps


def test_the_cli_writes_table_json_and_html_for_a_real_run(export_folder, tmp_path, capsys):
    json_path, html_path = tmp_path / "summary.json", tmp_path / "report.html"
    argv = [str(export_folder), "--step", "0", "--step", "1", "--json", str(json_path), "--html", str(html_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "== step 0: 4 trajectories ==" in out and "== step 0 -> 1 ==" in out
    summary = json.loads(json_path.read_text())
    overall = summary["steps"]["1"]["overall"]
    assert (overall["trajectories"], overall["prompts"], list(overall["pass_at_k"])) == (4, 2, ["1", "2"])
    assert overall["turns_known"] == 4
    assert sum(overall["stop_reasons"].values()) == 4
    assert html_path.read_text().count("data:image/png;base64,") >= 3
