"""Two training runs with the same `trainer.seed` on the same machine give the same rollouts, metrics, held-out evals
and weights. What differs: wall-clock metrics, and the engine's logprobs in their last bits (the hf engine batches the
agent loops' requests as thread timing brings them in, and batched forwards of other compositions round differently),
which only the rollout-vs-trainer logprob diagnostics read."""

from __future__ import annotations

import math

import pytest
import torch

from skyrl_gym.envs.gsm8k.synthetic_data import generate_dataset, write_dataset
from skyrl_train.config import load_config
from skyrl_train.testing import TINY_RUN_OVERRIDES, tiny_model  # noqa: F401

from .conftest import run_recorded

WALL_CLOCK = ("timestamp", "timing/", "memory/", "generate/rollout_tokens_per_s")
"""Metric keys (or prefixes) that measure time or memory: they differ between any two runs."""
ENGINE_LOGPROB_DIAGNOSTICS = (
    "policy/rollout_train_logprobs_abs_diff_mean",
    "policy/rollout_train_logprobs_abs_diff_std",
)
"""Metrics computed from the engine's logprobs, whose last bits depend on the batch composition."""


@pytest.fixture
def train_twice(tmp_path, tiny_model):  # noqa: F811
    """``train_twice(*overrides) -> [run, run]``: two runs of 2 training steps (2 gsm8k_multi_turn prompts x 2 samples
    each, at most 2 turns of 8 tokens, temperature 1) with a greedy eval of 2 held-out prompts before training and
    after each step. A run is ``(generations, metric rows, policy weights)``: every generator call's
    ``(phase, step, response ids)``, the `metrics.jsonl` rows, the trainable weights at the end."""
    splits = generate_dataset(train_size=4, val_size=2, seed=3, few_shot=0, env_class="gsm8k_multi_turn")
    write_dataset(splits, tmp_path / "data")

    def run(name: str, *overrides: str):
        out = tmp_path / name
        cfg = load_config(
            [
                f"data.train_data=[{tmp_path / 'data' / 'train.parquet'}]",
                f"data.val_data=[{tmp_path / 'data' / 'validation.parquet'}]",
                f"trainer.policy.model.path={tiny_model}",
                *TINY_RUN_OVERRIDES,
                "trainer.train_batch_size=2",
                "trainer.policy_mini_batch_size=2",
                "trainer.micro_train_batch_size_per_gpu=2",
                "trainer.micro_forward_batch_size_per_gpu=2",
                "generator.max_turns=2",
                "generator.sampling_params.max_generate_length=8",
                "generator.sampling_params.temperature=1.0",
                "generator.eval_sampling_params.max_generate_length=8",
                "trainer.policy.optimizer_config.lr=1e-3",
                "trainer.max_prompt_length=1024",
                "trainer.eval_interval=1",
                "trainer.ckpt_interval=-1",
                "trainer.hf_save_interval=-1",
                "trainer.logger=jsonl",
                f"trainer.ckpt_path={out / 'ckpts'}",
                f"trainer.export_path={out / 'exports'}",
                *overrides,
            ]
        )
        generations = []

        def record(generator_input, output) -> None:
            metadata = generator_input["batch_metadata"]
            generations.append((metadata.training_phase, metadata.global_step, output["response_ids"]))

        rows, weights = run_recorded(cfg, record)
        return generations, rows, weights

    return lambda *overrides: [run("first", *overrides), run("second", *overrides)]


def _split_metrics(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """(the metrics that must be equal, the engine-logprob diagnostics) of each row; wall-clock metrics dropped."""
    exact = [
        {k: v for k, v in row.items() if not k.startswith(WALL_CLOCK + ENGINE_LOGPROB_DIAGNOSTICS)} for row in rows
    ]
    engine = [{k: row[k] for k in ENGINE_LOGPROB_DIAGNOSTICS if k in row} for row in rows]
    return exact, engine


def test_two_runs_with_the_same_seed_give_the_same_rollouts_metrics_evals_and_weights(train_twice):
    (generations, rows, weights), (generations_2, rows_2, weights_2) = train_twice()
    assert [(phase, step) for phase, step, _ in generations] == [
        ("eval", 0),
        ("train", 1),
        ("eval", 1),
        ("train", 2),
        ("eval", 2),
    ]
    assert generations_2 == generations
    exact, engine = _split_metrics(rows)
    exact_2, engine_2 = _split_metrics(rows_2)
    assert [row.get("trainer/global_step") for row in exact] == [None, 1, 2]
    assert exact_2 == exact
    for row, row_2 in zip(engine, engine_2, strict=True):
        assert row.keys() == row_2.keys()
        assert all(math.isclose(row[k], row_2[k], rel_tol=0, abs_tol=1e-6) for k in row)
    assert weights_2.keys() == weights.keys()
    assert all(torch.equal(weights_2[name], weights[name]) for name in weights)
