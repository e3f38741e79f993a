"""`python -m skyrl_train.entrypoints.main_sft` on the tiny model: the loss falls, the eval hook and the metrics are
logged, a resumed run continues the same loss curve, and the policy is exported."""

from __future__ import annotations

import json

import pytest

from skyrl_train.entrypoints.main_sft import main
from skyrl_train.tracking.metrics_file import read_metrics

from .conftest import write_jsonl


def add_conversation(a: int, b: int) -> dict:
    call = {"type": "function", "function": {"name": "add", "arguments": json.dumps({"a": a, "b": b})}}
    return {
        "messages": [
            {"role": "system", "content": "Add numbers with the add tool."},
            {"role": "user", "content": f"What is {a}+{b}?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "content": str(a + b)},
            {"role": "assistant", "content": f"The answer is {a + b}."},
        ]
    }


@pytest.fixture
def sft_run(tmp_path, tiny_model):  # noqa: F811
    """``sft_run(name, *overrides) -> {step: metrics}``: main_sft on 8 tool conversations (4 per step, micro-batches
    of 2, lr 1e-3, fp32), an eval set of 2, checkpoints every 2 steps; runs of one name share their folders."""
    train = write_jsonl(tmp_path / "train.jsonl", [add_conversation(a, a + 1) for a in range(8)])
    evaluation = write_jsonl(tmp_path / "eval.jsonl", [add_conversation(a, 2 * a) for a in range(2)])

    def run(name: str, *overrides: str) -> dict[int, dict]:
        out = tmp_path / name
        code = main(
            [
                f"trainer.policy.model.path={tiny_model}",
                f"sft.train_data=[{train}]",
                f"sft.eval_data=[{evaluation}]",
                "sft.batch_size=4",
                "sft.lr=1e-3",
                "trainer.micro_train_batch_size_per_gpu=2",
                "trainer.bf16=false",
                "trainer.gradient_checkpointing=false",
                "trainer.eval_interval=2",
                "trainer.ckpt_interval=2",
                "trainer.logger=jsonl",
                f"trainer.ckpt_path={out / 'ckpts'}",
                f"trainer.export_path={out / 'exports'}",
                *overrides,
            ]
        )
        assert code == 0
        return read_metrics(out / "exports" / "metrics.jsonl").steps

    return run


def test_the_loss_falls_and_every_metric_is_logged(sft_run, tmp_path):
    rows = sft_run("run", "sft.num_epochs=2")
    assert sorted(rows) == [0, 1, 2, 3, 4]
    assert rows[4]["sft/loss"] < rows[1]["sft/loss"]
    assert rows[4]["eval/sft/loss"] < rows[0]["eval/sft/loss"]
    assert [rows[s]["sft/epoch"] for s in (1, 2, 3, 4)] == [0, 0, 1, 1]
    step = rows[1]
    assert step["sft/num_tokens"] > 0 and step["sft/tokens_per_s"] > 0 and step["sft/grad_norm"] > 0
    assert step["sft/lr"] == 1e-3 and step["sft/truncated_rows"] == 0 and 0 <= step["sft/token_accuracy"] <= 1
    assert "eval/sft/token_accuracy" in rows[2] and "eval/sft/loss" not in rows[1]
    exports = tmp_path / "run" / "exports"
    assert (exports / "global_step_4" / "policy" / "config.json").is_file()
    assert (exports / "report" / "summary.md").is_file()
    assert sorted(p.name for p in (tmp_path / "run" / "ckpts").iterdir()) == [
        "global_step_2",
        "global_step_4",
        "latest_ckpt_global_step.txt",
    ]


def test_a_resumed_run_continues_the_same_loss_curve(sft_run):
    whole = sft_run("whole", "sft.num_steps=4")
    sft_run("resumed", "sft.num_steps=2")  # stops after the checkpoint of step 2
    resumed = sft_run("resumed", "sft.num_steps=4")
    for step in (1, 2, 3, 4):
        assert resumed[step]["sft/loss"] == pytest.approx(whole[step]["sft/loss"], rel=1e-6, abs=0), step
    assert resumed[4]["eval/sft/loss"] == pytest.approx(whole[4]["eval/sft/loss"], rel=1e-6, abs=0)
    assert resumed[3]["sft/loss"] != resumed[1]["sft/loss"]  # the resume went on, not back to the start
