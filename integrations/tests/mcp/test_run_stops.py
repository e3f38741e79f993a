"""Runs over MCP tool servers that cannot work stop instead of training on placeholders.

Before the model loads (preflight): an unknown env id, a row without a ground truth, a missing demonstrations
file. During training: tool servers that went down after the run started make every trajectory an
infrastructure failure, and the first step stops with the count per stop reason.
"""

from __future__ import annotations

import json
import sys

import pytest

from skyrl_integrations.mcp.client import close_all_sessions
from skyrl_train.config import load_config
from skyrl_train.entrypoints.main_base import BasePPOExp
from skyrl_train.preflight import PreflightError
from skyrl_train.testing import tiny_model  # noqa: F401
from skyrl_train.trainer import InfraFailureError

TRUTH = {
    "task_id": "toy-0001",
    "max_turns": 2,
    "success": {"must_call_tool": True, "expected_answer": "5", "answer_match": "numeric"},
    "tool_sequence": [{"step": 1, "server": "toy", "tool": "add", "params": {"a": 2, "b": 3}}],
}


def row(ground_truth=TRUTH) -> dict:
    return {
        "data_source": "mcp/toy",
        "prompt": [{"role": "user", "content": "What is 2 + 3?"}],
        "env_class": "mcp_tool",
        "reward_spec": None if ground_truth is None else {"method": "rule", "ground_truth": ground_truth},
        "extra_info": {"servers": ["toy"]},
    }


@pytest.fixture
def experiment(tmp_path, tiny_model, toy_spec):  # noqa: F811
    """`experiment(rows, *overrides, server_env=None, exp_class=BasePPOExp, **mcp_config)`: an experiment over
    those rows (train data) and the toy server (started with `server_env` in its environment)."""

    def make(
        rows: list[dict], *overrides: str, server_env: dict | None = None, exp_class=BasePPOExp, **mcp_config
    ) -> BasePPOExp:
        train = tmp_path / "train.jsonl"
        train.write_text("".join(json.dumps(r) + "\n" for r in rows))
        cfg = load_config(
            [
                f"data.train_data=[{train}]",
                "data.val_data=[]",
                "environment.env_class=mcp_tool",
                f"trainer.policy.model.path={tiny_model}",
                "trainer.train_batch_size=2",
                "trainer.policy_mini_batch_size=2",
                "generator.n_samples_per_prompt=2",
                "generator.max_turns=2",
                "generator.max_input_length=2048",
                "generator.sampling_params.max_generate_length=8",
                "trainer.max_prompt_length=1024",
                "trainer.bf16=false",
                "trainer.logger=console",
                f"trainer.ckpt_path={tmp_path / 'ckpts'}",
                f"trainer.export_path={tmp_path / 'exports'}",
                *overrides,
            ]
        )
        servers = [{"name": "toy", "command": list(toy_spec().command), "env": server_env or {}}]
        cfg.environment.skyrl_gym.env_configs["mcp_tool"] = {"servers": servers, "retries": 0, **mcp_config}
        return exp_class(cfg)

    return make


def test_unknown_env_id_stops_before_the_model_loads(experiment):
    exp = experiment([row(), row()], "environment.env_class=no_such_env")
    with pytest.raises(PreflightError, match=r"environment.env_class='no_such_env': .*registered: .*mcp_tool"):
        exp.run()


def test_a_row_without_reward_spec_names_the_file_and_row(experiment, tmp_path):
    with pytest.raises(PreflightError) as stopped:
        experiment([row(), row(ground_truth=None), row()]).run()
    (problem,) = str(stopped.value).splitlines()[1:]
    assert f"data.train_data {tmp_path / 'train.jsonl'} row 1 (env_class 'mcp_tool')" in problem
    assert "reward_spec.ground_truth" in problem


def test_a_missing_demonstrations_file_is_named(experiment, tmp_path):
    missing = tmp_path / "no_demos.json"
    with pytest.raises(PreflightError, match=str(missing)):
        experiment([row(), row()], demonstrations=str(missing)).run()


def test_servers_down_after_the_start_stop_the_first_step_with_the_counts(experiment, tmp_path):
    down = tmp_path / "servers_are_down"

    class ServersGoDown(BasePPOExp):
        def preflight(self, train_dataset, eval_dataset):
            super().preflight(train_dataset, eval_dataset)  # the servers are up: the preflight passes
            down.touch()  # ... then their host goes down: no server can start again
            close_all_sessions()

    exp = experiment([row(), row()], server_env={"TOY_SERVER_DOWN_FLAG": str(down)}, exp_class=ServersGoDown)
    with pytest.raises(InfraFailureError) as stopped:
        exp.run()
    assert str(stopped.value).startswith(
        "4 of 4 trajectories ended in infrastructure failures, more than trainer.max_infra_failure_ratio=0.5: "
        "env_init_failed: 4. First failure (env 'mcp_tool', prompt uid 0): "
    )
    assert not (tmp_path / "ckpts").exists()  # no step completed


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
