"""The examples' scripts resolve the same configs as before their recipes became preset files.

Each test takes the arguments a script passes to `main_base` (its command, expanded by bash with fixed paths) and
resolves them as `main_base` does. The expected values are what the script resolved when its recipe was bash arrays of
overrides, written out as every key that differs from the base config; every other key
must keep the base value.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from skyrl_train.config import load_config, split_cli_args, to_dict
from skyrl_train.config.changes import flatten

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
OUT = "/runs/out"
MAIN_BASE = '"$python" -m skyrl_train.entrypoints.main_base'
DEMONSTRATIONS = '"$python" -m skyrl_integrations.datasets.demonstrations'


def script_arguments(
    script: Path,
    variables: Mapping[str, str],
    extra: tuple[str, ...] = (),
    command: str = MAIN_BASE,
    start: str | None = None,
) -> list[str]:
    """The arguments `script` passes to `command` (by default its one `"$python" -m skyrl_train.entrypoints.main_base
    ...`; the command's lines up to the first without a continuation, and from the line starting with `start`, when
    given, to the command), as bash expands them with `variables` set and `extra` as the script's own arguments."""
    lines = script.read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if line.lstrip().startswith(start or command))
    begin = next(i for i in range(first, len(lines)) if lines[i].lstrip().startswith(command))
    end = next(i for i in range(begin, len(lines)) if not lines[i].endswith("\\"))
    lines_run = "\n".join(lines[first : end + 1]).replace(command, "printf '%s\\0'", 1)
    assignments = "".join(f"{name}={shlex.quote(value)}\n" for name, value in variables.items())
    result = subprocess.run(
        ["bash", "-euc", assignments + lines_run, script.name, *extra], capture_output=True, text=True, check=True
    )
    return result.stdout.split("\0")[:-1]


def resolved(arguments: list[str]) -> dict[str, Any]:
    presets, overrides = split_cli_args(arguments)
    return flatten(to_dict(load_config(overrides, presets=presets)))


def base_with(changes: dict[str, Any]) -> dict[str, Any]:
    return {**flatten(to_dict(load_config(validate=False))), **changes}


MCP_BEFORE = {
    "data.train_data": [f"{OUT}/data/train.parquet"],
    "data.val_data": [f"{OUT}/data/validation.parquet"],
    "data.balance_by": "data_source",
    "trainer.policy.model.lora.rank": 32,
    "trainer.policy.model.lora.alpha": 64,
    "trainer.policy.optimizer_config.lr": 1e-4,
    "trainer.algorithm.kl_loss_coef": 0.05,
    "trainer.algorithm.zero_variance_filter": True,
    "trainer.algorithm.zero_variance_kl_rows": 1,
    "trainer.algorithm.zero_variance_kl_coef": 1.0,
    "trainer.algorithm.ptx_coef": 1.0,
    "trainer.algorithm.hinted_rows_positive_only": True,
    "generator.train_without_hints": True,
    "trainer.train_batch_size": 4,
    "trainer.policy_mini_batch_size": 4,
    "trainer.micro_train_batch_size_per_gpu": 2,
    "trainer.micro_forward_batch_size_per_gpu": 4,
    "trainer.use_sample_packing": True,
    "trainer.eval_batch_size": 1024,
    "trainer.eval_interval": 9,
    "trainer.ckpt_interval": 9,
    "trainer.ckpt_path": f"{OUT}/ckpts",
    "trainer.export_path": f"{OUT}/exports",
    "trainer.max_ckpts_to_keep": 1,
    "trainer.gradient_checkpointing": False,
    "trainer.max_prompt_length": 768,
    "trainer.project_name": "mcp_cpu",
    "trainer.run_name": "grpo_smollm2_lora_market",
    "trainer.logger": ["console", "jsonl", "tensorboard"],
    "trainer.warm_start": True,
    "sft.train_data": [f"{OUT}/data/warm_start.jsonl"],
    "sft.max_length": 1408,
    "sft.num_epochs": 2,
    "generator.max_num_seqs": 32,
    "generator.n_samples_per_prompt": 4,
    "generator.max_input_length": 1408,
    "generator.max_turns": 3,
    "generator.truncated_turn_ends_trajectory": True,
    "generator.sampling_params.max_generate_length": 96,
    "generator.sampling_params.temperature": 0.4,
    "generator.sampling_params.stop": ["</tool_call>"],
    "generator.eval_sampling_params.max_generate_length": 96,
    "generator.eval_sampling_params.stop": ["</tool_call>"],
    "environment.env_class": "mcp_tool",
    "environment.skyrl_gym.mcp_tool.demonstrations": f"{REPO}/examples/mcp/demonstrations.json",
    "environment.skyrl_gym.mcp_tool.max_calls_per_turn": 1,
    "environment.skyrl_gym.mcp_tool.reward_weights.format": 0,
    "environment.skyrl_gym.mcp_tool.reward_weights.tools": 0,
    "environment.skyrl_gym.mcp_tool.reward_weights.params": 0,
    "environment.skyrl_gym.mcp_tool.last_turn_note": "",
}

MCP_VLLM_BEFORE = {
    **MCP_BEFORE,
    "trainer.placement.colocate_all": False,
    "trainer.warm_start_reference": "base",
    "generator.backend": "vllm",
    "generator.model_dtype": "float32",
    "generator.engine_init_kwargs.kv_cache_memory_bytes": 1073741824,
    "generator.engine_init_kwargs.max_model_len": 4096,
}

GSM8K_BEFORE = {
    "data.train_data": [f"{OUT}/data/train.parquet"],
    "data.val_data": [f"{OUT}/data/validation.parquet"],
    "trainer.policy.model.lora.rank": 32,
    "trainer.policy.model.lora.alpha": 64,
    "trainer.policy.optimizer_config.lr": 2e-4,
    "trainer.algorithm.use_kl_loss": False,
    "trainer.train_batch_size": 4,
    "trainer.policy_mini_batch_size": 4,
    "trainer.micro_train_batch_size_per_gpu": 2,
    "trainer.micro_forward_batch_size_per_gpu": 16,
    "trainer.use_sample_packing": True,
    "trainer.eval_batch_size": 128,
    "trainer.eval_interval": 24,
    "trainer.ckpt_interval": 12,
    "trainer.ckpt_path": f"{OUT}/ckpts",
    "trainer.export_path": f"{OUT}/exports",
    "trainer.max_ckpts_to_keep": 1,
    "trainer.gradient_checkpointing": False,
    "trainer.max_prompt_length": 384,
    "trainer.project_name": "gsm8k_cpu",
    "trainer.run_name": "grpo_smollm2_lora",
    "trainer.logger": ["console", "jsonl", "tensorboard"],
    "generator.n_samples_per_prompt": 4,
    "generator.max_input_length": 384,
    "generator.sampling_params.max_generate_length": 64,
    "generator.eval_sampling_params.max_generate_length": 64,
}

TAU_BENCH_BEFORE = {
    "data.train_data": [f"{OUT}/data/retail/train.jsonl"],
    "data.val_data": [f"{OUT}/data/retail/test.jsonl"],
    "trainer.policy.model.lora.rank": 32,
    "trainer.policy.model.lora.alpha": 64,
    "trainer.policy.optimizer_config.lr": 2e-4,
    "trainer.algorithm.use_kl_loss": False,
    "trainer.train_batch_size": 2,
    "trainer.policy_mini_batch_size": 2,
    "trainer.use_sample_packing": True,
    "trainer.eval_batch_size": 16,
    "trainer.eval_interval": 1,
    "trainer.ckpt_interval": 1,
    "trainer.ckpt_path": f"{OUT}/ckpts",
    "trainer.export_path": f"{OUT}/exports",
    "trainer.max_ckpts_to_keep": 1,
    "trainer.gradient_checkpointing": False,
    "trainer.max_prompt_length": 1536,
    "trainer.project_name": "tau_bench_cpu",
    "trainer.run_name": "grpo_smollm2_lora_retail",
    "trainer.logger": ["console", "jsonl", "tensorboard"],
    "generator.max_num_seqs": 16,
    "generator.n_samples_per_prompt": 4,
    "generator.max_input_length": 2048,
    "generator.max_turns": 3,
    "generator.sampling_params.max_generate_length": 64,
    "generator.sampling_params.temperature": 0.7,
    "generator.sampling_params.stop": ["</tool_call>"],
    "generator.eval_sampling_params.max_generate_length": 64,
    "generator.eval_sampling_params.stop": ["</tool_call>"],
    "environment.env_class": "tau_bench",
    "environment.skyrl_gym.tau_bench.include_policy": False,
    "environment.skyrl_gym.tau_bench.tool_prompt": "compact",
    "environment.skyrl_gym.tau_bench.max_turns": 3,
    "environment.skyrl_gym.tau_bench.demonstrations": f"{REPO}/examples/tau_bench/demonstrations.json",
    "environment.skyrl_gym.tau_bench.user.kind": "llm",
    "environment.skyrl_gym.tau_bench.user.base_url": "http://127.0.0.1:8123/v1",
    "environment.skyrl_gym.tau_bench.user.model": "smollm2-135m-instruct",
    "environment.skyrl_gym.tau_bench.user.strategy": "llm",
    "environment.skyrl_gym.tau_bench.user.max_tokens": 24,
    "environment.skyrl_gym.tau_bench.user.temperature": 0.0,
    "environment.skyrl_gym.tau_bench.user.timeout_s": 600,
}


def test_main_job_resolves_the_config_it_resolved_before():
    arguments = script_arguments(
        EXAMPLES / "mcp" / "run_grpo.sh", {"repo_root": str(REPO), "OUT": OUT, "DATA": f"{OUT}/data"}
    )
    assert resolved(arguments) == base_with(MCP_BEFORE)


def test_main_jobs_demonstrations_are_played_with_the_env_settings_its_training_command_resolves():
    variables = {"repo_root": str(REPO), "OUT": OUT, "DATA": f"{OUT}/data", "WARM_START_SIZE": "", "TRAIN_SIZE": "72"}
    script = EXAMPLES / "mcp" / "run_grpo.sh"
    demonstrations = script_arguments(
        script, {**variables, "WARM_START_RECOVERY": "0.25"}, command=DEMONSTRATIONS, start="warm_start_env="
    )
    options = list(zip(demonstrations[::2], demonstrations[1::2], strict=True))
    env_config = json.loads(dict(options)["--env-config"])
    assert [pair for pair in options if pair[0] != "--env-config"] == [
        ("--data", f"{OUT}/data/warm_start_questions/train.parquet"),
        # none of the questions the run trains or evaluates on
        ("--exclude", f"{OUT}/data/train.parquet"),
        ("--exclude", f"{OUT}/data/validation.parquet"),
        ("--output", f"{OUT}/data/warm_start.jsonl"),
        ("--max-turns", "3"),
        ("--limit", "72"),
        ("--recovery-fraction", "0.25"),
    ]
    presets, overrides = split_cli_args(script_arguments(script, variables))
    training = to_dict(load_config(overrides, presets=presets))
    assert env_config == training["environment"]["skyrl_gym"]["mcp_tool"]
    assert int(dict(options)["--max-turns"]) == training["generator"]["max_turns"]


def test_main_job_with_the_vllm_preset_resolves_the_config_engine_vllm_resolved_before():
    # what ENGINE=vllm puts before the script's own arguments
    vllm = ("--config", str(EXAMPLES / "cpu_vllm.yaml"), "trainer.warm_start_reference=base")
    arguments = script_arguments(
        EXAMPLES / "mcp" / "run_grpo.sh", {"repo_root": str(REPO), "OUT": OUT, "DATA": f"{OUT}/data"}, vllm
    )
    assert resolved(arguments) == base_with(MCP_VLLM_BEFORE)


def test_gsm8k_example_resolves_the_config_it_resolved_before():
    arguments = script_arguments(
        EXAMPLES / "gsm8k" / "run_gsm8k.sh", {"repo_root": str(REPO), "OUT": OUT, "DATA": f"{OUT}/data"}
    )
    assert resolved(arguments) == base_with(GSM8K_BEFORE)


def test_tau_bench_example_resolves_the_config_it_resolved_before():
    variables = {
        "repo_root": str(REPO),
        "OUT": OUT,
        "DOMAIN": "retail",
        "DATA": f"{OUT}/data/retail",
        "USER_BASE_URL": "http://127.0.0.1:8123/v1",
        "USER_MODEL": "smollm2-135m-instruct",
        "USER_STRATEGY": "llm",
    }
    arguments = script_arguments(EXAMPLES / "tau_bench" / "run_tau_bench.sh", variables)
    assert resolved(arguments) == base_with(TAU_BENCH_BEFORE)


def test_a_scripts_own_arguments_come_after_its_preset_and_paths():
    arguments = script_arguments(
        EXAMPLES / "gsm8k" / "run_gsm8k.sh",
        {"repo_root": str(REPO), "OUT": OUT, "DATA": f"{OUT}/data"},
        ("trainer.epochs=3", "trainer.ckpt_path=/elsewhere"),
    )
    assert resolved(arguments) == base_with({**GSM8K_BEFORE, "trainer.epochs": 3, "trainer.ckpt_path": "/elsewhere"})
