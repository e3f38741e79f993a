"""`evaluate`'s figures: over every trajectory (an infrastructure failure is not solved), pass^k over repeated
trials, and one count per trajectory in step-wise mode. The generator is scripted (outcomes by prompt and sample)
so the expected numbers can be written out."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from skyrl_train.evaluate import evaluate
from skyrl_train.generators.base import GeneratorInput, GeneratorInterface, GeneratorOutput


class ScriptedOutcomes(GeneratorInterface):
    """Trajectory k of prompt "p" ends as `outcomes[p][k]`: a reward (stop reason "stop") or "crash" (an
    `env_init_failed` placeholder); `turns` > 1 emits that many step-wise rows per trajectory."""

    def __init__(self, outcomes: dict[str, list[float | str]], turns: int = 1):
        self.outcomes = outcomes
        self.turns = turns

    async def generate(self, input_batch: GeneratorInput) -> GeneratorOutput:
        rows: dict[str, list] = {key: [] for key in ("rewards", "stop_reasons", "is_last_step", "env_metrics")}
        for prompt, tid in zip(input_batch["prompts"], input_batch["trajectory_ids"], strict=True):
            outcome = self.outcomes[prompt[0]["content"]][tid.repetition_id]
            crashed = outcome == "crash"
            turns = 1 if crashed else self.turns
            for turn in range(turns):
                last = turn == turns - 1
                rows["rewards"].append([0.0 if crashed or not last else float(outcome)])
                rows["stop_reasons"].append("env_init_failed" if crashed else "stop")
                rows["is_last_step"].append(last)
                rows["env_metrics"].append({} if not last else {"turns": turns})
        count = len(rows["rewards"])
        return GeneratorOutput(
            prompt_token_ids=[[1]] * count,
            response_ids=[[2]] * count,
            loss_masks=[[1]] * count,
            rollout_logprobs=None,
            trajectory_ids=None,
            **{**rows, "is_last_step": rows["is_last_step"] if self.turns > 1 else None},
        )


def config(n: int):
    return SimpleNamespace(
        generator=SimpleNamespace(eval_n_samples_per_prompt=n, eval_sampling_params=None),
        environment=SimpleNamespace(env_class="gsm8k"),
    )


def batches(*prompts: str):
    return [
        {
            "prompt": [[{"role": "user", "content": p}] for p in prompts],
            "env_class": [None] * len(prompts),
            "env_extras": [{"data_source": "src"} for _ in prompts],
            "uid": [str(i) for i in range(len(prompts))],
        }
    ]


async def test_infrastructure_failures_count_as_unsolved_and_pass_hat_k_measures_consistency():
    generator = ScriptedOutcomes({"a": [1.0, 1.0], "b": [1.0, "crash"]})
    metrics = await evaluate(batches("a", "b"), generator, config(2), 0, tokenizer=None, dump_dir=None)
    assert metrics["eval/all/pass_at_2"] == 1.0  # each prompt has a solved sample
    assert metrics["eval/all/avg_score"] == pytest.approx(0.75)  # the crash scores 0, it is not left out
    assert metrics["eval/all/infra_failure_rate"] == pytest.approx(0.25)
    assert metrics["eval/all/pass_hat_1"] == pytest.approx(0.75)
    assert metrics["eval/all/pass_hat_2"] == pytest.approx(0.5)  # a: both solved (1); b: not both (0)
    assert metrics["eval/src/pass_hat_2"] == pytest.approx(0.5)


async def test_step_wise_rows_count_once_per_trajectory():
    generator = ScriptedOutcomes({"a": [1.0, 0.0]}, turns=3)
    metrics = await evaluate(batches("a"), generator, config(2), 0, tokenizer=None, dump_dir=None)
    assert metrics["eval/all/avg_score"] == pytest.approx(0.5)  # 2 trajectories, not 6 rows
    assert metrics["eval/all/generate/stop_reason/stop"] == 2


async def test_one_sample_per_prompt_reports_no_pass_hat_k():
    metrics = await evaluate(batches("a"), ScriptedOutcomes({"a": [1.0]}), config(1), 0, tokenizer=None, dump_dir=None)
    assert metrics["eval/all/pass_at_1"] == 1.0
    assert not any("pass_hat" in key for key in metrics)
