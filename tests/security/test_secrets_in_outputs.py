"""A secret planted in every secret-bearing field and env var of a tiny run appears in no file the run writes.

The run is the real entrypoint in its own process (`python -m skyrl_train.entrypoints.main_base`): one GRPO step of
the tiny model on MCP tool tasks (`skyrl_integrations.datasets.rule_based`, the bundled `market` server, offline)
with an eval before and after it, its dumps, a checkpoint, an HF export, the training batch dump, the live policy
served over HTTP during generation, the console, JSONL and TensorBoard loggers and the run report; then `export_hf` turns its checkpoint into a model folder. Each
secret is a distinct token sharing one random marker, planted in:

- the config: the MCP server's `env` (it reaches the server process), a tau-bench user simulator's `api_key`, keys
  of custom code whose names say they are secrets (added with `+`), and
  every key of the schema whose path says it holds a secret (`is_secret_path`: the serving endpoint's API key; the
  remote engines' keys are refused on a run without remote engines, so they never leave the process) that the
  config accepts on this run;
- the environment: cloud, W&B, Hugging Face, OpenAI, tool API, Ray and serving credentials.

Every file below the run's folders (checkpoints, exports, the console log) is read as bytes, binary files
(``.pt``, ``.safetensors``, tfevents) included, and none may hold the marker.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from skyrl_integrations.datasets import rule_based
from skyrl_train.config import ConfigError, load_config, to_dict
from skyrl_train.config.changes import flatten
from skyrl_train.entrypoints.export_hf import main as export_main
from skyrl_train.testing import TINY_RUN_OVERRIDES, tiny_model  # noqa: F401
from skyrl_train.utils.redact import is_secret_path

MARKER = f"plnt{uuid.uuid4().hex}"
ENV_SECRETS = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "WANDB_API_KEY",
    "HF_TOKEN",
    "OPENAI_API_KEY",
    "POLYGON_API_KEY",
    "SLACK_BOT_TOKEN",
    "TAVILY_API_KEY",
    "RAY_AUTH_TOKEN",
    "SKYRL_API_KEY",
    "SKYRL_CONTROL_TOKEN",
)
SERVER_ENV = "environment.skyrl_gym.mcp_tool.servers.market.env"
USER = "environment.skyrl_gym.tau_bench.user"


def token(field: str) -> str:
    """The planted value of `field`: the marker and a suffix that names the field in a failure."""
    return f"{MARKER}-{field.replace('.', '-')}"


def schema_secret_overrides(base: list[str]) -> list[str]:
    """`key=<token>` for every string-or-unset key of the schema at a secret path that this run's config accepts."""
    overrides = []
    for key, value in flatten(to_dict(load_config(base, validate=False))).items():
        if not is_secret_path(key.split(".")) or not (value is None or isinstance(value, str)):
            continue
        try:
            load_config([*base, f"{key}={token(key)}"])
        except ConfigError:  # e.g. a serving key refused where nothing serves: it never leaves the process
            continue
        overrides.append(f"{key}={token(key)}")
    return overrides


def written_files(*roots: Path) -> list[Path]:
    return sorted(p for root in roots for p in root.rglob("*") if p.is_file() and not p.is_symlink())


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_model):  # noqa: F811
    """The run's folder (`ckpts/`, `exports/`, `console.log`) and its `export_hf` output (`model/`)."""
    data, out = tmp_path_factory.mktemp("data"), tmp_path_factory.mktemp("run")
    rule_based.main(["--output-dir", str(data), "--train-size", "4", "--val-size", "2", "--seed", "0", "--no-jsonl"])
    base = [
        f"data.train_data=[{data / 'train.parquet'}]",
        f"data.val_data=[{data / 'validation.parquet'}]",
        "environment.env_class=mcp_tool",
        f"trainer.policy.model.path={tiny_model}",
        *TINY_RUN_OVERRIDES,
        "trainer.max_prompt_length=1024",
        "generator.max_input_length=2048",
        "generator.max_turns=2",
        "generator.eval_sampling_params.max_generate_length=4",
        "trainer.eval_batch_size=2",
        "trainer.eval_interval=1",
        "trainer.ckpt_interval=1",
        "trainer.hf_save_interval=1",
        "trainer.dump_data_batch=true",
        "trainer.logger=[console,jsonl,tensorboard]",
        "generator.enable_http_endpoint=true",  # the live policy served during generation, behind its API key
        "generator.http_endpoint_port=0",
        f"trainer.ckpt_path={out / 'ckpts'}",
        f"trainer.export_path={out / 'exports'}",
    ]
    planted = [
        f"+{SERVER_ENV}.MARKET_SERVICE_URL={token('server-env')}",
        "+environment.skyrl_gym.mcp_tool.servers.market.bundled=market",
        f"+{USER}.kind=llm",
        f"+{USER}.base_url=http://127.0.0.1:9/v1",
        f"+{USER}.model=user-llm",
        f"+{USER}.api_key={token('user-api-key')}",
        f"+generator.judge_api_key={token('custom-api-key')}",  # keys of custom code, logged as added with `+`
        f"+trainer.algorithm.reward_service_password={token('custom-password')}",
        *schema_secret_overrides(base),
    ]
    env = {**os.environ, **{name: token(name) for name in ENV_SECRETS}, "AWS_ENDPOINT_URL": "http://127.0.0.1:9"}
    command = [sys.executable, "-m", "skyrl_train.entrypoints.main_base", *base, *planted]
    with open(out / "console.log", "w") as log:
        trained = subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=600)
    console = (out / "console.log").read_text()
    assert trained.returncode == 0, console[-5000:]
    assert export_main([str(out / "ckpts" / "global_step_1"), str(out / "model")]) == 0
    return out


def test_the_run_wrote_every_kind_of_output(run):
    names = {p.relative_to(run).as_posix() for p in written_files(run)}
    expected = {
        "ckpts/global_step_1/trainer_state.pt",
        "ckpts/global_step_1/data.pt",
        "ckpts/global_step_1/policy/extra_state.pt",
        "ckpts/global_step_1/policy/optimizer.pt",
        "exports/config.json",
        "exports/metrics.jsonl",
        "exports/dumped_data/global_step_1_training_input.pkl",
        "exports/dumped_evals/global_step_1_evals/aggregated_results.jsonl",
        "exports/report/summary.json",
        "model/model.safetensors",
    }
    assert expected <= names, sorted(expected - names)
    assert any(name.startswith("exports/tensorboard/events.out.tfevents.") for name in names)
    console = (run / "console.log").read_text()
    assert "Config: " in console  # the changed-config log, with the planted keys
    assert "  generator.http_endpoint_api_key: None -> '<redacted>'  [override]" in console
    assert "generator.judge_api_key='<redacted>' was added with `+`" in console


def test_no_file_the_run_wrote_holds_a_planted_secret(run):
    leaks = {}
    for path in written_files(run):
        data = path.read_bytes()
        at = data.find(MARKER.encode())
        if at >= 0:
            leaks[path.relative_to(run).as_posix()] = data[at : at + len(MARKER) + 40]
    assert leaks == {}
