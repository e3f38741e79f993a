"""Evaluation: generate on the eval set, compute `eval/*` metrics, and dump every trajectory.

Metric names follow upstream: `eval/<data_source>/{avg_score, pass_at_<n>, mean_positive_reward}`, the same
under `eval/all/`, and the rollout metrics under `eval/all/generate/...`. `avg_score` is the mean trajectory
return (the same definition as training's `reward/avg_raw_reward`, from `skyrl_train.metrics`).

Dumps (upstream layout): `<export_path>/dumped_evals/global_step_<N>_evals/<data_source>.jsonl`, one row per
trajectory, and `aggregated_results.jsonl` with the metrics.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from skyrl_train.generators.base import GeneratorInterface, GeneratorOutput
from skyrl_train.generators.utils import get_rollout_metrics
from skyrl_train.metrics import sanitize_metric_key
from skyrl_train.trainer_utils import output_uids, prepare_generator_input, reward_metrics
from skyrl_train.utils.fs import atomic_write_text

_EVAL_NAMES = {"avg_raw_reward": "avg_score"}
_DROPPED = {"variance_per_prompt", "signal_ratio"}  # training-signal diagnostics, not eval results


def _eval_metric_name(key: str) -> str:
    source, _, name = key.rpartition("/")
    name = _EVAL_NAMES.get(name, name)
    return f"eval/{source or 'all'}/{name}"


def concatenate_outputs(outputs: list[GeneratorOutput]) -> GeneratorOutput:
    """Row-wise concatenation of generator outputs (per-batch rollout metrics are dropped)."""
    merged: dict[str, Any] = {}
    for key in outputs[0]:
        if key == "rollout_metrics":
            continue
        values = [out.get(key) for out in outputs]
        merged[key] = None if any(v is None for v in values) else [row for v in values for row in v]
    return GeneratorOutput(**merged)


async def evaluate(
    eval_loader, generator: GeneratorInterface, cfg, global_step: int | None, tokenizer, dump_dir: Path | None
) -> dict[str, float]:
    """Run the eval set once; returns the `eval/*` metrics and (if `dump_dir`) writes the dumps there."""
    n = cfg.generator.eval_n_samples_per_prompt
    outputs, uids, env_classes, env_extras = [], [], [], []
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
        outputs.append(output)
        uids += output_uids(output, batch_uids)
        env_classes += generator_input["env_classes"]
        env_extras += generator_input["env_extras"]
    output = concatenate_outputs(outputs)
    data_sources = [extras.get("data_source") for extras in env_extras]
    metrics = {
        _eval_metric_name(key): value
        for key, value in reward_metrics(output, uids, data_sources, n).items()
        if key.rpartition("/")[2] not in _DROPPED
    }
    rollout = get_rollout_metrics(
        output["response_ids"], output["stop_reasons"], env_classes, output["env_metrics"], output.get("is_last_step")
    )
    metrics.update({f"eval/all/{key}": value for key, value in rollout.items()})
    if dump_dir is not None:
        dump_eval_results(dump_dir, output, env_classes, env_extras, data_sources, tokenizer, metrics)
    return metrics


def dump_eval_results(dump_dir: Path, output, env_classes, env_extras, data_sources, tokenizer, metrics) -> None:
    """One JSONL per data source with upstream's row fields, plus `aggregated_results.jsonl`."""
    dump_dir.mkdir(parents=True, exist_ok=True)
    rows_by_source: dict[str, list[str]] = defaultdict(list)
    for i, source in enumerate(data_sources):
        row = {
            "input_prompt": tokenizer.decode(output["prompt_token_ids"][i]),
            "output_response": tokenizer.decode(output["response_ids"][i]),
            "score": output["rewards"][i],
            "stop_reason": output["stop_reasons"][i] if output.get("stop_reasons") else None,
            "env_class": env_classes[i],
            "env_extras": env_extras[i],
            "data_source": source,
        }
        rows_by_source[sanitize_metric_key(source)].append(json.dumps(row, default=str))
    for source, rows in rows_by_source.items():
        atomic_write_text(dump_dir / f"{source}.jsonl", "\n".join(rows) + "\n")
    atomic_write_text(dump_dir / "aggregated_results.jsonl", json.dumps(metrics) + "\n")
