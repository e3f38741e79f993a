"""The SkyPilot task YAMLs as SkyPilot itself parses them, the overrides their run commands pass, and the node
bootstrap's arithmetic. The off-cloud two-node run is in test_tasks_cluster.py (slow).

SkyPilot's parser runs in its own venv (.venv/sky, made by tasks/launch/setup_sky.sh: skypilot pins click and
uvicorn below what the training venv needs), so these tests call it as a subprocess.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from skyrl_train.config import load_config

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO_ROOT / "tasks" / "node"), str(REPO_ROOT / "tasks" / "sizing")]

import bootstrap  # noqa: E402
import sizing  # noqa: E402

TASKS = ["eval", "grpo", "gsm8k", "tau_bench"]
TRAINING_TASKS = ["grpo", "gsm8k", "tau_bench"]
# Envs the YAMLs leave null (SkyPilot refuses to launch without them).
REQUIRED_ENVS = ["USER_BASE_URL=http://127.0.0.1:9/v1", "USER_MODEL=user-llm"]
GPU_CHOICES = [{"accelerators": {"B200": 8}}, {"accelerators": {"H200": 8}}]
REQUIRED_SECRETS = ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]


def _check_tasks(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    setup = subprocess.run(["bash", "tasks/launch/setup_sky.sh"], cwd=REPO_ROOT, capture_output=True, text=True)
    assert setup.returncode == 0, setup.stderr[-3000:]
    env = {**os.environ, "HOME": str(home), "SKYPILOT_DISABLE_USAGE_COLLECTION": "1"}
    return subprocess.run(
        [str(REPO_ROOT / ".venv" / "sky" / "bin" / "python"), "tasks/launch/check_tasks.py", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


@pytest.fixture(scope="module")
def parsed(tmp_path_factory) -> dict[str, dict]:
    """Every task YAML through `sky.Task.from_yaml_config`, offline, with an empty HOME (no credentials)."""
    files = [f"tasks/{name}.yaml" for name in TASKS]
    env_args = [arg for env in REQUIRED_ENVS for arg in ("--env", env)]
    result = _check_tasks(*files, *env_args, home=tmp_path_factory.mktemp("home"))
    assert result.returncode == 0, result.stderr[-3000:]
    return {Path(task["file"]).stem: task for task in json.loads(result.stdout)}


def test_every_task_yaml_is_tested():
    assert sorted(p.stem for p in (REPO_ROOT / "tasks").glob("*.yaml")) == TASKS


@pytest.mark.parametrize("name", TRAINING_TASKS)
def test_gpu_tasks_ask_for_any_of_8_b200_or_8_h200_on_one_node(parsed, name):
    task = parsed[name]
    assert task["name"] == f"skyrl-{name.replace('_', '-')}"
    assert task["num_nodes"] == 1
    assert task["resources_mode"] == "any_of"
    disk = {r["disk_size"] for r in task["resources"]}
    assert len(disk) == 1
    assert [{"accelerators": r["accelerators"]} for r in task["resources"]] == GPU_CHOICES
    assert task["workdir"] == "."
    assert "bash tasks/node/setup_node.sh" in task["setup"]
    assert "tasks/node/bootstrap.py" in task["run"]


@pytest.mark.parametrize(
    "name, lora_rank, use_ref, seq_len",
    [("grpo", 0, True, 16384 + 1024), ("gsm8k", 0, False, 384 + 64), ("tau_bench", 32, False, 16384 + 1024)],
)
def test_gpu_task_disk_holds_the_checkpoints_sizing_computes(parsed, name, lora_rank, use_ref, seq_len):
    task = parsed[name]
    settings = sizing.RunSettings(seq_len=seq_len, lora_rank=lora_rank, use_ref=use_ref)
    needed = sizing.disk_bytes_per_node(sizing.load_model(task["envs"]["MODEL"]), settings, num_nodes=1)
    assert task["resources"][0]["disk_size"] * 1000**3 >= needed
    assert task["resources"][0]["disk_size"] * 1000**3 < 2 * needed  # sized, not a blanket number


def test_eval_task_needs_no_gpu_and_room_for_one_checkpoint(parsed):
    task = parsed["eval"]
    assert task["num_nodes"] == 1
    assert task["resources"] == [{"accelerators": None, "disk_size": 256, "cpus": "16+", "memory": "128+"}]
    # The largest default training model (Qwen3-8B, full fine-tuning): one checkpoint, its export, the base model.
    needed = sizing.disk_bytes_per_node(sizing.load_model("Qwen/Qwen3-8B"), sizing.RunSettings(keep_local=0))
    assert needed <= 256 * 1000**3 < 2 * needed
    assert {
        k: task["envs"][k] for k in ("CHECKPOINT", "MODEL", "EVAL_RUN_NAME", "VAL_DATA", "RUN_NAME")
    } == dict.fromkeys(("CHECKPOINT", "MODEL", "EVAL_RUN_NAME", "VAL_DATA", "RUN_NAME"), "")
    # The gsm8k task's sizes, so the default eval set is the held-out split the gsm8k run evaluated.
    gsm8k = parsed["gsm8k"]["envs"]
    assert (task["envs"]["TRAIN_SIZE"], task["envs"]["VAL_SIZE"]) == (gsm8k["TRAIN_SIZE"], gsm8k["VAL_SIZE"])
    for step in ("skyrl_train.entrypoints.export_hf", "skyrl_train.entrypoints.main_generate", "skyrl-analyze-evals"):
        assert step in task["run"], step


@pytest.mark.parametrize(
    "chosen",
    [{}, {"MODEL": "m", "EVAL_RUN_NAME": "r"}, {"CHECKPOINT": "s3://b/p/r/global_step_1", "MODEL": "m"}],
)
def test_eval_run_needs_exactly_one_of_checkpoint_model_or_run_to_analyse(tmp_path, chosen):
    import yaml

    task = yaml.safe_load((REPO_ROOT / "tasks" / "eval.yaml").read_text())
    env = {**os.environ, **{k: str(v) for k, v in task["envs"].items()}, "SKYRL_OUTPUT_DIR": str(tmp_path), **chosen}
    result = subprocess.run(["bash", "-c", task["run"]], cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 2
    assert "set exactly one of CHECKPOINT, MODEL (evaluate) or EVAL_RUN_NAME" in result.stderr
    assert not any(tmp_path.iterdir())  # refused before anything ran


@pytest.mark.parametrize("name", TASKS)
def test_credentials_are_secrets_passed_at_launch_never_values_in_the_file(parsed, name):
    task = parsed[name]
    assert set(REQUIRED_SECRETS) <= set(task["launch_secrets"])
    if name != "eval":
        assert "WANDB_API_KEY" in task["launch_secrets"]
    if name == "tau_bench":
        assert "OPENAI_API_KEY" in task["launch_secrets"]  # the user simulator's endpoint
    raw = (REPO_ROOT / "tasks" / f"{name}.yaml").read_text()
    import yaml

    secrets = yaml.safe_load(raw)["secrets"]
    assert all(value in (None, "") for value in secrets.values()), secrets
    credential_words = ("KEY", "TOKEN", "SECRET", "PASSWORD")
    assert not [k for k in task["envs"] if any(word in k for word in credential_words)], task["envs"]


def test_task_installs_are_pinned_and_read_pypi_alone():
    files = [p for p in (REPO_ROOT / "tasks").rglob("*") if p.is_file() and p.suffix in (".sh", ".yaml", ".txt")]
    assert not [p for p in files if "EXTRA_INDEX" in p.read_text().upper() or "extra-index" in p.read_text()]
    setup_node = (REPO_ROOT / "tasks" / "node" / "setup_node.sh").read_text()
    assert 'pip install --quiet --user "uv==$UV_VERSION"' in setup_node and "\nUV_VERSION=0.13.8\n" in setup_node
    sky_requirements = (REPO_ROOT / "tasks" / "requirements-sky.txt").read_text().splitlines()
    assert [line for line in sky_requirements if line and not line.startswith("#")] == ["skypilot==0.14.1"]


def test_node_setup_refuses_an_unpinned_vllm_before_installing_anything(tmp_path):
    env = {**os.environ, "VLLM_SPEC": "vllm>=0.33", "SKYRL_PYTHON": str(tmp_path / "no-python")}
    result = subprocess.run(
        ["bash", "tasks/node/setup_node.sh"], cwd=REPO_ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 2
    assert result.stderr == "setup_node: VLLM_SPEC=vllm>=0.33 is not a pinned requirement (vllm==<version>)\n"


@pytest.mark.parametrize("name", TRAINING_TASKS)
def test_training_tasks_declare_the_run_envs(parsed, name):
    envs = parsed[name]["envs"]
    for key in (
        "MODEL",
        "RUN_NAME",
        "RESUME_RUN_NAME",
        "S3_CHECKPOINT_BUCKET",
        "S3_TRAJECTORY_BUCKET",
        "EXTRA_OVERRIDES",
    ):
        assert key in envs, key
    assert envs["RUN_NAME"] == "" and envs["RESUME_RUN_NAME"] == ""
    assert envs["SKYRL_RAY_PORT"] != str(bootstrap.SKYPILOT_RAY_PORT)


def test_grpo_mounts_its_data_version_from_s3(parsed):
    task = parsed["grpo"]
    assert task["envs"]["DATA_VERSION"] == "v1"
    assert "DATA_VERSION" not in parsed["gsm8k"]["envs"]  # generated data: an env nothing reads is not declared
    assert task["file_mounts"] == {"/data/skyrl": "s3://skyrl-datasets/v1"}
    assert "OPENAI_API_KEY" in task["inline_secrets"] and "TAVILY_API_KEY" in task["inline_secrets"]


# --- the overrides the run commands pass --------------------------------------------------------------------------


def _job_command(name: str, tmp_path: Path, **env: str) -> dict:
    """What the task's run command would start on rank 0 (the bootstrap's dry run), with the YAML's envs."""
    import yaml

    task = yaml.safe_load((REPO_ROOT / "tasks" / f"{name}.yaml").read_text())
    run_env = {
        **os.environ,
        **{k: str(v) for k, v in task["envs"].items() if v is not None},
        "SKYPILOT_NODE_IPS": "10.0.0.1\n10.0.0.2",
        "SKYPILOT_NUM_GPUS_PER_NODE": "8",
        "SKYRL_OUTPUT_DIR": str(tmp_path),
        "SKYRL_BOOTSTRAP_DRY_RUN": "1",
        "RUN_NAME": "run-1",
        **env,
    }
    result = subprocess.run(["bash", "-c", task["run"]], cwd=REPO_ROOT, env=run_env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_gsm8k_run_passes_only_overrides_the_config_accepts(tmp_path):
    job = _job_command("gsm8k", tmp_path, SKYPILOT_NODE_RANK="0", TRAIN_SIZE="8", VAL_SIZE="4")
    assert job["command"][:3] == [".venv/bin/python", "-m", "skyrl_train.entrypoints.main_base"]
    assert job["overrides"] == [
        "trainer.run_name=run-1",
        f"trainer.ckpt_path={tmp_path}/run-1/ckpts",
        f"trainer.export_path={tmp_path}/run-1/exports",
        "trainer.strategy=single",
        "generator.backend=hf",
    ]
    cfg = load_config(job["command"][3:] + job["overrides"])
    assert cfg.trainer.run_name == "run-1"
    assert cfg.trainer.policy.model.path == "Qwen/Qwen2.5-1.5B-Instruct"
    assert cfg.data.train_data == [f"{tmp_path}/data/gsm8k/train.parquet"]
    assert (tmp_path / "data" / "gsm8k" / "train.parquet").is_file()
    assert job["log_file"] == f"{tmp_path}/run-1/job.log"


def test_tau_bench_run_passes_overrides_the_config_and_the_env_accept(tmp_path):
    from skyrl_integrations.tau_bench.config import TauBenchEnvConfig

    job = _job_command(
        "tau_bench", tmp_path, SKYPILOT_NODE_RANK="0", USER_BASE_URL="http://10.0.0.9:8000/v1", USER_MODEL="user-llm"
    )
    cfg = load_config(job["command"][3:] + job["overrides"])
    assert cfg.environment.env_class == "tau_bench"
    assert cfg.trainer.policy.model.lora.rank == 32
    env_cfg = TauBenchEnvConfig.from_env_config(cfg.environment.skyrl_gym.get_env_config("tau_bench"))
    assert env_cfg.user == {
        "kind": "llm",
        "base_url": "http://10.0.0.9:8000/v1",
        "model": "user-llm",
        "strategy": "llm",
    }
    assert (tmp_path / "data" / "tau_bench" / "retail" / "train.jsonl").stat().st_size > 0


@pytest.mark.parametrize("backend, colocated, engines", [("hf", False, 1), ("vllm", True, 16)])
@pytest.mark.parametrize("name", ["gsm8k", "tau_bench"])
def test_training_tasks_with_fsdp2_on_two_nodes_pass_overrides_the_config_accepts(
    tmp_path, name, backend, colocated, engines
):
    """No reference model of their own (no KL term / LoRA), so no ref placement: the config would refuse it."""
    job = _job_command(
        name,
        tmp_path,
        SKYPILOT_NODE_RANK="1",  # rank 1: no data generation; the dry run prints rank 0's job
        STRATEGY="fsdp2",
        INFERENCE_BACKEND=backend,
        USER_BASE_URL="http://10.0.0.9:8000/v1",
        USER_MODEL="user-llm",
    )
    assert not any(o.startswith("trainer.placement.ref_") for o in job["overrides"])
    cfg = load_config(job["command"][3:] + job["overrides"])
    placement = cfg.trainer.placement
    assert (cfg.trainer.strategy, placement.policy_num_nodes, placement.policy_num_gpus_per_node) == ("fsdp2", 2, 8)
    assert (cfg.generator.backend, placement.colocate_all, cfg.generator.num_inference_engines) == (
        backend,
        colocated,
        engines,
    )
    # each node's own disk: with S3_CHECKPOINT_BUCKET (test_training_tasks_declare_the_run_envs) every node's
    # checkpoint shards go through S3
    assert cfg.trainer.ckpt_path == f"{tmp_path}/run-1/ckpts"


def test_grpo_run_passes_overrides_the_config_accepts_with_colocated_vllm_engines(tmp_path):
    # rank 1 skips the dataset check of /data/skyrl (mounted from S3 on a cluster); the dry run prints rank 0's job.
    job = _job_command("grpo", tmp_path, SKYPILOT_NODE_RANK="1", EXTRA_OVERRIDES="trainer.epochs=2")
    assert job["command"][-1] == "trainer.epochs=2"
    cfg = load_config(job["command"][3:] + job["overrides"])
    g, placement = cfg.generator, cfg.trainer.placement
    assert (cfg.trainer.strategy, g.backend, placement.colocate_all) == ("fsdp2", "vllm", True)
    assert (placement.policy_num_nodes, placement.policy_num_gpus_per_node) == (2, 8)
    assert (placement.ref_num_nodes, placement.ref_num_gpus_per_node) == (2, 8)  # full fine-tuning with a KL term
    assert (g.num_inference_engines, g.inference_engine_tensor_parallel_size) == (16, 1)
    assert (g.gpu_memory_utilization, cfg.trainer.epochs) == (0.7, 2)


# --- bootstrap arithmetic -----------------------------------------------------------------------------------------


def _node(rank=0, ips="10.0.0.1\n10.0.0.2", gpus="8", **extra) -> bootstrap.NodeInfo:
    return bootstrap.node_info(
        {"SKYPILOT_NODE_RANK": str(rank), "SKYPILOT_NODE_IPS": ips, "SKYPILOT_NUM_GPUS_PER_NODE": gpus, **extra}
    )


def test_node_info_reads_skypilot_variables_head_first():
    node = _node(rank=1, ips="10.0.0.1\n10.0.0.2\n")
    assert node == bootstrap.NodeInfo(rank=1, ips=("10.0.0.1", "10.0.0.2"), gpus_per_node=8, ray_port=6479)
    assert node.head_address == "10.0.0.1:6479" and node.num_nodes == 2


@pytest.mark.parametrize(
    "env, message",
    [
        ({"SKYPILOT_NODE_RANK": "0", "SKYPILOT_NODE_IPS": ""}, "SKYPILOT_NODE_IPS is not set"),
        ({"SKYPILOT_NODE_IPS": "10.0.0.1"}, "SKYPILOT_NODE_RANK is not set"),
        ({"SKYPILOT_NODE_RANK": "2", "SKYPILOT_NODE_IPS": "a\nb"}, "SKYPILOT_NODE_RANK=2 is outside 0..1"),
        ({"SKYPILOT_NODE_RANK": "x", "SKYPILOT_NODE_IPS": "a"}, "SKYPILOT_NODE_RANK='x' is not an integer"),
        ({"SKYPILOT_NODE_RANK": "0", "SKYPILOT_NODE_IPS": "a", "SKYRL_RAY_PORT": "6380"}, "SkyPilot's own Ray port"),
    ],
)
def test_node_info_names_the_bad_variable(env, message):
    with pytest.raises(bootstrap.BootstrapError, match=message):
        bootstrap.node_info(env)


RUN_OVERRIDES = ["trainer.run_name=r", "trainer.ckpt_path=/out/r/ckpts", "trainer.export_path=/out/r/exports"]
PLACEMENT_2x8 = ["trainer.placement.policy_num_nodes=2", "trainer.placement.policy_num_gpus_per_node=8"]
REF_PLACEMENT_2x8 = ["trainer.placement.ref_num_nodes=2", "trainer.placement.ref_num_gpus_per_node=8"]


def test_single_process_overrides_ignore_the_cluster_shape():
    overrides = bootstrap.job_overrides(_node(), "r", Path("/out"))
    assert overrides == RUN_OVERRIDES + ["trainer.strategy=single", "generator.backend=hf"]


def test_fsdp2_with_vllm_spans_every_gpu_with_colocated_engines():
    overrides = bootstrap.job_overrides(
        _node(), "r", Path("/out"), strategy="fsdp2", backend="vllm", engine_tensor_parallel_size=2, ref_model=True
    )
    fsdp2_vllm = ["trainer.strategy=fsdp2", "generator.backend=vllm"]
    assert overrides == RUN_OVERRIDES + fsdp2_vllm + PLACEMENT_2x8 + REF_PLACEMENT_2x8 + [
        "generator.num_inference_engines=8",  # 16 GPUs / TP 2
        "generator.inference_engine_tensor_parallel_size=2",
    ]


def test_fsdp2_with_the_hf_engine_does_not_colocate_engines():
    overrides = bootstrap.job_overrides(_node(), "r", Path("/out"), strategy="fsdp2", backend="hf")
    assert overrides == RUN_OVERRIDES + ["trainer.strategy=fsdp2", "generator.backend=hf"] + PLACEMENT_2x8 + [
        "trainer.placement.colocate_all=false"  # the driver's one hf engine, not one per GPU
    ]


@pytest.mark.parametrize(
    "gpus, kwargs, message",
    [
        ("0", dict(strategy="fsdp2"), "fsdp2 needs GPUs"),
        ("8", dict(strategy="fsdp2", backend="vllm", engine_tensor_parallel_size=3), "--engine-tp 3 does not divide"),
        ("8", dict(strategy="megatron"), "not one of single, fsdp2"),
        ("8", dict(backend="sglang"), "not one of hf, vllm"),
    ],
)
def test_job_overrides_refuse_what_cannot_be_placed(gpus, kwargs, message):
    with pytest.raises(bootstrap.BootstrapError, match=message):
        bootstrap.job_overrides(_node(gpus=gpus), "r", Path("/out"), **kwargs)


def test_ray_commands_use_our_port_and_block_under_the_bootstrap():
    head, worker = _node(rank=0), _node(rank=1)
    head_cmd = bootstrap.ray_start_command(head, ["--num-cpus=4"])
    assert head_cmd[1:] == [
        "start",
        "--block",
        "--head",
        "--port=6479",
        "--node-ip-address=10.0.0.1",
        "--num-gpus=8",
        "--num-cpus=4",
    ]
    assert Path(head_cmd[0]).name == "ray"
    assert bootstrap.ray_start_command(worker, [])[3:5] == ["--address=10.0.0.1:6479", "--node-ip-address=10.0.0.2"]


def test_ray_token_auth_is_always_on_with_the_shared_token():
    shared = {"RAY_AUTH_TOKEN": "t" * 32}  # pragma: allowlist secret
    assert bootstrap.ray_auth_env(shared, _node()) == {"RAY_AUTH_MODE": "token", **shared}
    assert bootstrap.ray_auth_env(shared, _node(ips="10.0.0.1")) == {"RAY_AUTH_MODE": "token", **shared}


def test_a_single_node_without_a_token_generates_its_own_and_several_nodes_stop():
    single = _node(ips="10.0.0.1")
    first, second = (bootstrap.ray_auth_env({}, single) for _ in range(2))
    assert first["RAY_AUTH_MODE"] == "token" and len(first["RAY_AUTH_TOKEN"]) == 64
    assert first["RAY_AUTH_TOKEN"] != second["RAY_AUTH_TOKEN"]
    with pytest.raises(
        bootstrap.BootstrapError, match="RAY_AUTH_TOKEN is empty, and the 2 nodes of this task need one"
    ):
        bootstrap.ray_auth_env({"RAY_AUTH_TOKEN": ""}, _node())


def test_default_run_name_is_task_and_utc_time():
    when = datetime.datetime(2026, 11, 23, 10, 15, 0, tzinfo=datetime.UTC)
    assert bootstrap.default_run_name("grpo", when) == "grpo-20261123-101500"
