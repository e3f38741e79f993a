"""Off-cloud simulation of a 2-node SkyPilot launch: the gsm8k task's `run` command on ranks 0 and 1 of this machine
(both 127.0.0.1, distinct Ray ports) forms a real 2-node Ray cluster and trains 2 GRPO steps of a tiny model on CPU,
writing checkpoints and eval dumps to a real S3-compatible server (moto); then the eval task's `run` command
evaluates the step-2 checkpoint from S3 (exported, eval dumps to S3, report), and analyses the run's own dumps.

With `STRATEGY=fsdp2` the policy has one rank on each node (1 fake GPU per node, gloo on the CPU), and each node keeps
checkpoints on a disk of its own (`SKYRL_NODE_CKPT_PATH`), as cluster nodes do: every node uploads its shards to S3.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
from contextlib import ExitStack
from pathlib import Path

import pytest
import yaml

from skyrl_train.config.schema import DISTRIBUTED_STRATEGIES
from skyrl_train.models.tiny import make_tiny_causal_lm
from skyrl_train.testing.s3 import s3_bucket, s3_client, s3_server  # noqa: F401

REPO_ROOT = Path(__file__).resolve().parents[1]
RUN_NAME = "gsm8k-offcloud"
REPORT_FILES = {"MANIFEST.json", "report.html", "summary.json", "summary.txt"}
TINY_CPU_OVERRIDES = (
    "trainer.bf16=false trainer.gradient_checkpointing=false trainer.policy.model.lora.rank=4 "
    "trainer.train_batch_size=4 trainer.policy_mini_batch_size=4 trainer.micro_train_batch_size_per_gpu=4 "
    "trainer.micro_forward_batch_size_per_gpu=8 generator.n_samples_per_prompt=2 trainer.max_prompt_length=512 "
    "generator.sampling_params.max_generate_length=4 generator.eval_sampling_params.max_generate_length=4 "
    "trainer.eval_batch_size=4 trainer.eval_interval=2 trainer.ckpt_interval=2 trainer.logger=[console,jsonl]"
)


def _free_ports(n: int) -> list[int]:
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]


def _ray_node_args(head: bool) -> str:
    """`ray start` ports of one simulated node, distinct from the other node's on the same machine."""
    ports = _free_ports(7)
    args = [
        "--num-cpus=1",
        "--object-store-memory=100000000",
        f"--node-manager-port={ports[0]}",
        f"--object-manager-port={ports[1]}",
        f"--dashboard-agent-listen-port={ports[2]}",
        f"--dashboard-agent-grpc-port={ports[3]}",
        f"--metrics-export-port={ports[4]}",
        f"--runtime-env-agent-port={ports[5]}",
    ]
    if head:
        args += ["--include-dashboard=false", f"--ray-client-server-port={ports[6]}"]
    return " ".join(args)


def _task(name: str) -> dict:
    return yaml.safe_load((REPO_ROOT / "tasks" / f"{name}.yaml").read_text())


def _task_env(task: dict, **overrides: str) -> dict[str, str]:
    """This process's environment (which holds the S3 test server's), the task's envs, then `overrides`."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    return {**env, **{k: str(v) for k, v in task["envs"].items() if v is not None}, **overrides}


def _dumped_rows(endpoint: str, bucket: str, key: str) -> list[tuple[str, str]]:
    """(prompt, response) of each trajectory of an eval dump file in S3."""
    body = s3_client(endpoint).get_object(Bucket=bucket, Key=key)["Body"].read().decode()
    return [(row["input_prompt"], row["output_response"]) for row in map(json.loads, body.splitlines())]


def _run_eval_task(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", _task("eval")["run"]], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def _objects(endpoint: str, bucket: str, prefix: str) -> set[str]:
    pages = s3_client(endpoint).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return {obj["Key"].removeprefix(prefix) for page in pages for obj in page.get("Contents", [])}


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("strategy", ["single", "fsdp2"])
def test_two_node_gsm8k_run_then_eval_of_its_checkpoint_through_s3(
    tmp_path, s3_server, s3_bucket, strategy  # noqa: F811
):
    gsm8k = _task("gsm8k")
    cluster = dict(
        STRATEGY=strategy,
        SKYPILOT_NODE_IPS="127.0.0.1\n127.0.0.1",
        SKYPILOT_NUM_GPUS_PER_NODE="1" if strategy in DISTRIBUTED_STRATEGIES else "0",
        SKYRL_RAY_PORT=str(_free_ports(1)[0]),
        SKYRL_OUTPUT_DIR=str(tmp_path / "runs"),
        RUN_NAME=RUN_NAME,
        MODEL=make_tiny_causal_lm(),
        TRAIN_SIZE="8",
        VAL_SIZE="4",
        S3_CHECKPOINT_BUCKET=s3_bucket,
        S3_TRAJECTORY_BUCKET=s3_bucket,
        EXTRA_OVERRIDES=TINY_CPU_OVERRIDES,
        RAY_USAGE_STATS_ENABLED="0",
        RAY_AUTH_TOKEN=secrets.token_hex(32),  # one token for both nodes, as launch.sh passes it
    )
    nodes = {}
    for rank in (1, 0):  # the worker first: it waits for the head, as on a cluster where nodes start in any order
        node_disk = (
            {"SKYRL_NODE_CKPT_PATH": str(tmp_path / f"node{rank}_disk")} if strategy in DISTRIBUTED_STRATEGIES else {}
        )
        env = _task_env(
            gsm8k,
            **cluster,
            **node_disk,
            SKYPILOT_NODE_RANK=str(rank),
            SKYRL_RAY_START_ARGS=_ray_node_args(head=rank == 0),
        )
        with open(tmp_path / f"node{rank}.log", "w") as log:  # the child keeps its own copy of the descriptor
            nodes[rank] = subprocess.Popen(
                ["bash", "-c", gsm8k["run"]], cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
            )
    try:
        head_status = nodes[0].wait(timeout=780)
        worker_status = nodes[1].wait(timeout=90)
    finally:
        for proc in nodes.values():
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=60)
    head_log, worker_log = ((tmp_path / f"node{rank}.log").read_text() for rank in (0, 1))
    assert head_status == 0, head_log[-5000:]
    assert worker_status == 0, worker_log[-3000:]
    assert "bootstrap: 2 node(s) joined 127.0.0.1:" in head_log
    assert f"bootstrap: head 127.0.0.1:{cluster['SKYRL_RAY_PORT']} is gone; node 1 leaves" in worker_log

    # One run name for S3 checkpoints, S3 eval dumps and the job log.
    job_log = (tmp_path / "runs" / RUN_NAME / "job.log").read_text()
    assert (
        f"checkpoints to s3://{s3_bucket}/skyrl-gsm8k/{RUN_NAME}/ and eval dumps to s3://{s3_bucket}/evals/{RUN_NAME}/"
        in job_log
    )
    metrics = (tmp_path / "runs" / RUN_NAME / "exports" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in metrics] == [0, 1, 2]  # eval before training, 2 training steps
    checkpoints = _objects(s3_server, s3_bucket, f"skyrl-gsm8k/{RUN_NAME}/")
    assert "global_step_2/MANIFEST.json" in checkpoints, sorted(checkpoints)
    if strategy in DISTRIBUTED_STRATEGIES:  # a rank on each node, each node's shard uploaded from that node
        assert "policy ranks [0, 1] do not share trainer.ckpt_path with the driver" in job_log
        shards = {"global_step_2/policy/model_optim/__0_0.distcp", "global_step_2/policy/model_optim/__1_0.distcp"}
        assert shards <= checkpoints, sorted(checkpoints)
    dumps = _objects(s3_server, s3_bucket, f"evals/{RUN_NAME}/")
    assert {"global_step_0/aggregated_results.jsonl", "global_step_2/aggregated_results.jsonl"} <= dumps, dumps

    # The eval task evaluates the step-2 checkpoint from S3 on the run's validation split, dumps to S3, reports.
    eval_env = dict(
        S3_CHECKPOINT_BUCKET=s3_bucket,
        S3_TRAJECTORY_BUCKET=s3_bucket,
        SKYRL_OUTPUT_DIR=str(tmp_path / "runs"),
        TRAIN_SIZE=cluster["TRAIN_SIZE"],
        VAL_SIZE=cluster["VAL_SIZE"],
        EXTRA_OVERRIDES=TINY_CPU_OVERRIDES,
    )
    checkpoint = f"s3://{s3_bucket}/skyrl-gsm8k/{RUN_NAME}/global_step_2"
    evaluated = _run_eval_task(_task_env(_task("eval"), **eval_env, CHECKPOINT=checkpoint, RUN_NAME="eval-step2"))
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert f"exported {checkpoint} to {tmp_path}/runs/eval-step2/model" in evaluated.stdout
    assert _objects(s3_server, s3_bucket, "evals/eval-step2/") == {
        "eval_only/MANIFEST.json",
        "eval_only/aggregated_results.jsonl",
        "eval_only/synthetic_arithmetic.jsonl",
    }
    # Greedy decoding: the exported checkpoint answers the run's own step-2 eval prompts exactly as the run did.
    by_checkpoint = _dumped_rows(s3_server, s3_bucket, "evals/eval-step2/eval_only/synthetic_arithmetic.jsonl")
    by_run = _dumped_rows(s3_server, s3_bucket, f"evals/{RUN_NAME}/global_step_2/synthetic_arithmetic.jsonl")
    assert len(by_checkpoint) == 4 and sorted(by_checkpoint) == sorted(by_run)
    summary = json.loads((tmp_path / "runs" / "analysis" / "eval-step2" / "summary.json").read_text())
    assert summary["source"] == f"s3://{s3_bucket}/evals/eval-step2"
    assert list(summary["steps"]) == ["eval_only"]
    assert _objects(s3_server, s3_bucket, "analysis/eval-step2/") == REPORT_FILES

    # Without a model, it analyses the dumps the training run wrote at each eval.
    if strategy in DISTRIBUTED_STRATEGIES:
        return  # as with single
    analysis = _run_eval_task(_task_env(_task("eval"), **eval_env, EVAL_RUN_NAME=RUN_NAME, STEPS="0 2"))
    assert analysis.returncode == 0, analysis.stderr[-3000:]
    summary = json.loads((tmp_path / "runs" / "analysis" / RUN_NAME / "summary.json").read_text())
    assert summary["source"] == f"s3://{s3_bucket}/evals/{RUN_NAME}"
    assert list(summary["steps"]) == ["0", "2"]
    assert _objects(s3_server, s3_bucket, f"analysis/{RUN_NAME}/") == REPORT_FILES
