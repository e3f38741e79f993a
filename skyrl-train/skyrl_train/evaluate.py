"""Evaluation: generate on the eval set, compute `eval/*` metrics, and dump every trajectory.

Metric names follow upstream: `eval/<data_source>/{avg_score, pass_at_<n>, mean_positive_reward}`, the same
under `eval/all/`, and the rollout metrics under `eval/all/generate/...`. `avg_score` is the mean trajectory
return (the same definition as training's `reward/avg_raw_reward`, from `skyrl_train.metrics`). Every figure is
over all trajectories: one that ended in an infrastructure failure is not solved and scores 0, and
`eval/<data_source>/infra_failure_rate` says how many did. In step-wise mode a trajectory counts once. With
`generator.eval_n_samples_per_prompt` = n > 1, `pass_hat_<k>` (k = 1..n) measures consistency over repeated trials
(tau-bench's pass^k: all k of k trials solved).

Dumps (upstream layout): `<export_path>/dumped_evals/global_step_<N>_evals/<data_source>.jsonl`, one row per
trajectory (per turn in step-wise mode), and `aggregated_results.jsonl` with the metrics. A row has upstream's
fields (`input_prompt`, `output_response`, `score`, `stop_reason`, `env_class`, `env_extras`, `data_source`) and,
where the generator or env reports them (a field is left out, never guessed, when nothing reports it):

- `trajectory_id`: `{"instance_id", "repetition_id"}` (the prompt's uid and which of its samples);
- `messages`: the conversation as role/content messages (prompt after env init, then each turn's assistant
  text and the env's observations, the final one included), with `num_prompt_messages` marking where the
  prompt ends;
- `num_turns`: model generations in the trajectory (assistant messages after the prompt; else the env's `turns`);
- `tool_calls`: the env's `tool_calls` metric; `parse_failures`: `{kind: count}` from the env's
  `parse_failures_<kind>` metrics;
- `env_metrics`: the trajectory's whole `env_metrics` dict (env `get_metrics()` plus the generator's counters);
- `infra_failure`: `{"reason", "error"}` of a trajectory that ended in an infrastructure failure (the generator's
  `skyrl_gym.InfraFailure`, its `to_json` form; the reason is also the row's `stop_reason`);
- `weight_version`: the weight version that generated the row (the trainer's global step whose update produced the
  weights; 0 = the starting weights), as the engine reported it;
- `is_last_step`: step-wise mode only.

Secrets never reach a dump: entries with secret-looking names are redacted, and so is every occurrence, anywhere in a
row, of a secret value: an environment variable's with a secret-looking name, or a secret entry's of the run's config
(an MCP server's `env`, a user simulator's `api_key`; `skyrl_train.utils.redact`).
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from skyrl_gym.common.fs import atomic_write_text
from skyrl_gym.common.outcomes import trajectory_solved
from skyrl_train.config import to_dict
from skyrl_train.generators.base import GeneratorInterface, GeneratorOutput
from skyrl_train.metrics import pass_hat_k_metrics, sanitize_metric_key
from skyrl_train.trainer_utils import Rollouts, prepare_generator_input, reward_metrics
from skyrl_train.utils.redact import redact_secrets, scrub_secret_values, secret_values

_EVAL_NAMES = {"avg_raw_reward": "avg_score"}
_DROPPED = {"variance_per_prompt", "signal_ratio"}  # training-signal diagnostics, not eval results


def _eval_metric_name(key: str) -> str:
    source, _, name = key.rpartition("/")
    name = _EVAL_NAMES.get(name, name)
    return f"eval/{source or 'all'}/{name}"


async def evaluate(
    eval_loader, generator: GeneratorInterface, cfg, global_step: int | None, tokenizer, dump_dir: Path | None
) -> dict[str, float]:
    """Run the eval set once; returns the `eval/*` metrics and (if `dump_dir`) writes the dumps there."""
    n = cfg.generator.eval_n_samples_per_prompt
    parts = []
    for batch in eval_loader:
        generator_input, batch_uids = prepare_generator_input(
            batch,
            n,
            cfg.generator.eval_sampling_params,
            cfg.environment.env_class,
            "eval",
            global_step,
        )
        output = await generator.generate(generator_input)
        parts.append(Rollouts.from_generation(generator_input, batch_uids, output))
    rollouts = Rollouts.concatenate(parts)
    metrics = {
        _eval_metric_name(key): value
        for key, value in reward_metrics(rollouts, n).items()
        if key.rpartition("/")[2] not in _DROPPED
    }
    if n > 1:
        metrics.update({_eval_metric_name(key): value for key, value in _pass_hat_k(rollouts).items()})
    metrics.update({f"eval/all/{key}": value for key, value in rollouts.rollout_metrics().items()})
    if dump_dir is not None:
        dump_eval_results(dump_dir, rollouts, tokenizer, metrics, secret_values(to_dict(cfg)))
    return metrics


def _pass_hat_k(rollouts: Rollouts) -> dict[str, float]:
    """pass^k over the repeated trials of each prompt (`skyrl_train.metrics.pass_hat_k_metrics`)."""
    rows = rollouts.trajectory_rows()
    failed = rollouts.infra_failed()
    env_metrics = rollouts.output.get("env_metrics") or [None] * rollouts.num_rows
    rewards = rollouts.trajectory_rewards()
    solved = [
        not failed[i] and trajectory_solved(reward, env_metrics[i]) for i, reward in zip(rows, rewards, strict=True)
    ]
    return pass_hat_k_metrics(solved, [rollouts.uids[i] for i in rows], [rollouts.data_sources[i] for i in rows])


def dump_eval_results(
    dump_dir: Path, rollouts: Rollouts, tokenizer, metrics: dict[str, float], secrets: list[str] | None = None
) -> None:
    """One JSONL per data source (rows as in the module doc), plus `aggregated_results.jsonl`; `secrets`: the values
    to scrub from every row (default: `secret_values()`, the secret env vars')."""
    dump_dir.mkdir(parents=True, exist_ok=True)
    secrets = secret_values() if secrets is None else secrets
    rows_by_source: dict[str, list[str]] = defaultdict(list)
    for i, source in enumerate(rollouts.data_sources):
        row = dump_row(rollouts.output, i, rollouts.env_classes[i], rollouts.env_extras[i], source, tokenizer)
        line = scrub_secret_values(json.dumps(redact_secrets(row), default=str).encode(), secrets).decode()
        rows_by_source[sanitize_metric_key(source)].append(line)
    for source, rows in rows_by_source.items():
        atomic_write_text(dump_dir / f"{source}.jsonl", "\n".join(rows) + "\n")
    atomic_write_text(dump_dir / "aggregated_results.jsonl", json.dumps(metrics) + "\n")


def dump_row(output: GeneratorOutput, i: int, env_class: str, env_extras, data_source, tokenizer) -> dict[str, Any]:
    """Row `i` of `output` as a dump row (fields in the module doc; not yet redacted)."""
    row = {
        "input_prompt": tokenizer.decode(output["prompt_token_ids"][i]),
        "output_response": tokenizer.decode(output["response_ids"][i]),
        "score": output["rewards"][i],
        "stop_reason": output["stop_reasons"][i] if output.get("stop_reasons") else None,
        "env_class": env_class,
        "env_extras": env_extras,
        "data_source": data_source,
    }
    trajectory_id = _row_value(output, "trajectory_ids", i)
    if trajectory_id is not None:
        row["trajectory_id"] = dataclasses.asdict(trajectory_id)
    env_metrics = _row_value(output, "env_metrics", i) or {}
    conversation = _row_value(output, "conversations", i)
    if conversation is not None:
        row["messages"] = [*conversation.prompt, *conversation.response]
        row["num_prompt_messages"] = len(conversation.prompt)
        row["num_turns"] = sum(message.get("role") == "assistant" for message in conversation.response)
    elif "turns" in env_metrics:
        row["num_turns"] = env_metrics["turns"]
    if "tool_calls" in env_metrics:
        row["tool_calls"] = env_metrics["tool_calls"]
    parse_failures = {
        key.removeprefix("parse_failures_"): value
        for key, value in env_metrics.items()
        if key.startswith("parse_failures_")
    }
    if parse_failures:
        row["parse_failures"] = parse_failures
    if env_metrics:
        row["env_metrics"] = env_metrics
    infra_failure = _row_value(output, "infra_failures", i)
    if infra_failure is not None:
        row["infra_failure"] = infra_failure.to_json()
    if output.get("is_last_step") is not None:
        row["is_last_step"] = output["is_last_step"][i]
    weight_version = _row_value(output, "weight_versions", i)
    if weight_version is not None:
        row["weight_version"] = weight_version
    return row


def _row_value(output: GeneratorOutput, key: str, i: int) -> Any:
    values = output.get(key)
    return None if values is None else values[i]
