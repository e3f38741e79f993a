"""Node bootstrap for the SkyPilot tasks: one Ray cluster over the task's nodes, then the job on the head node.

Every node of a task runs the same `run` command:

    .venv/bin/python tasks/node/bootstrap.py --task gsm8k --strategy single -- \\
        .venv/bin/python -m skyrl_train.entrypoints.main_base key=value ...

From SkyPilot's variables (SKYPILOT_NODE_RANK, SKYPILOT_NODE_IPS: one IP a line, head first,
SKYPILOT_NUM_GPUS_PER_NODE):

- rank 0 starts a Ray head on its own port (`SKYRL_RAY_PORT`, default 6479: SkyPilot runs its own Ray on 6380, so
  nothing here attaches with `address=auto`), waits until every node has joined, then runs the command with
  `RAY_ADDRESS` set to that head and the overrides of `job_overrides` appended: the run name (one name for W&B, the
  S3 prefixes and the log file), strategy and engine backend and, for `--strategy fsdp2`, the placement computed
  from the node and GPU counts (the reference model's too with `--ref-model`).
  `trainer.ckpt_path` is on each node's own disk (under SKYRL_OUTPUT_DIR): with fsdp2 on 2+ nodes every node then
  uploads its checkpoint shards to S3 (the tasks set S3_CHECKPOINT_BUCKET), and without S3 the trainer refuses to
  start (skyrl-train/docs/distributed.md, "Checkpoints and exports").
  Its output is also written to `{SKYRL_OUTPUT_DIR}/{run_name}/job.log`. The exit status is the command's.
- every other rank waits for the head, joins it, and stays until the head is gone (the job ended), then exits 0.

Each node's Ray runs under `ray start --block` as a child of this script, so stopping it stops only that node's Ray
processes (never `ray stop`, which would stop every Ray on the machine, SkyPilot's included).

Token auth (Ray >= 2.52) is always on (`RAY_AUTH_MODE=token` for every Ray process and the job): without it, anyone
who reaches a node's Ray ports can submit jobs and run code there. The token is `RAY_AUTH_TOKEN`, a SkyPilot secret
(so every node gets the same one, and it is never in the task file or a command line); `tasks/launch/launch.sh`
generates a fresh one for each launch when none is given. A single-node task without one generates its own (only
that node's processes need it); a task of several nodes without one stops with an error, as its nodes could not
agree on a token.

`SKYRL_RAY_START_ARGS` adds `ray start` arguments on this node (e.g. distinct ports, to simulate two nodes on one
machine as the tests do). `SKYRL_BOOTSTRAP_DRY_RUN=1` prints, as JSON, the command rank 0 would run with its
overrides and the log file, and exits without starting anything (on any rank).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from skyrl_train.config.schema import STRATEGIES

DEFAULT_RAY_PORT = 6479
SKYPILOT_RAY_PORT = 6380
BACKENDS = ("hf", "vllm")


class BootstrapError(RuntimeError):
    """A node's environment or the cluster is not what the bootstrap needs; the message names what is wrong."""


@dataclass(frozen=True)
class NodeInfo:
    """This node's place in the cluster, from SkyPilot's environment variables."""

    rank: int
    ips: tuple[str, ...]
    gpus_per_node: int
    ray_port: int

    @property
    def num_nodes(self) -> int:
        return len(self.ips)

    @property
    def head_ip(self) -> str:
        return self.ips[0]

    @property
    def head_address(self) -> str:
        return f"{self.head_ip}:{self.ray_port}"


def _int_var(environ: Mapping[str, str], name: str, default: str | None = None) -> int:
    raw = environ.get(name, default)
    if raw is None or raw.strip() == "":
        raise BootstrapError(f"{name} is not set (SkyPilot sets it on every node of a task)")
    try:
        return int(raw)
    except ValueError:
        raise BootstrapError(f"{name}={raw!r} is not an integer") from None


def node_info(environ: Mapping[str, str]) -> NodeInfo:
    """Read SKYPILOT_NODE_RANK, SKYPILOT_NODE_IPS, SKYPILOT_NUM_GPUS_PER_NODE and SKYRL_RAY_PORT."""
    ips = tuple(line.strip() for line in environ.get("SKYPILOT_NODE_IPS", "").splitlines() if line.strip())
    if not ips:
        raise BootstrapError("SKYPILOT_NODE_IPS is not set or empty (one node IP a line, head first)")
    rank = _int_var(environ, "SKYPILOT_NODE_RANK")
    if not 0 <= rank < len(ips):
        raise BootstrapError(
            f"SKYPILOT_NODE_RANK={rank} is outside 0..{len(ips) - 1} (SKYPILOT_NODE_IPS has {len(ips)})"
        )
    gpus = _int_var(environ, "SKYPILOT_NUM_GPUS_PER_NODE", "0")
    if gpus < 0:
        raise BootstrapError(f"SKYPILOT_NUM_GPUS_PER_NODE={gpus} is negative")
    port = _int_var(environ, "SKYRL_RAY_PORT", str(DEFAULT_RAY_PORT))
    if port == SKYPILOT_RAY_PORT:
        raise BootstrapError(
            f"SKYRL_RAY_PORT={port} is SkyPilot's own Ray port; use another (default {DEFAULT_RAY_PORT})"
        )
    return NodeInfo(rank=rank, ips=ips, gpus_per_node=gpus, ray_port=port)


def default_run_name(task: str, now: datetime.datetime | None = None) -> str:
    """`{task}-{UTC yyyymmdd-HHMMSS}`: used when RUN_NAME is empty."""
    now = now or datetime.datetime.now(datetime.UTC)
    return f"{task}-{now:%Y%m%d-%H%M%S}"


def job_overrides(
    node: NodeInfo,
    run_name: str,
    output_dir: Path,
    *,
    strategy: str = "single",
    backend: str = "hf",
    engine_tensor_parallel_size: int = 1,
    ref_model: bool = False,
) -> list[str]:
    """Config overrides rank 0 appends to the job's command.

    Always the run name, the checkpoint/export folders under `{output_dir}/{run_name}`, the strategy and the engine
    backend. `single` is one process on rank 0: the cluster shape does not change its config (other nodes idle).
    With `fsdp2` the policy workers (and with `ref_model`, a job whose reference is a model of its own: full
    fine-tuning with a KL term, the ref workers, placed like the policy) span every GPU of every node, and
    - `vllm`: one engine per `engine_tensor_parallel_size` GPUs, colocated with the workers (upstream's default);
    - `hf`: the driver's own hf engine, so the workers are not colocated with engines (`colocate_all=false`).
    """
    if strategy not in STRATEGIES:
        raise BootstrapError(f"--strategy {strategy!r} is not one of {', '.join(STRATEGIES)}")
    if backend not in BACKENDS:
        raise BootstrapError(f"--backend {backend!r} is not one of {', '.join(BACKENDS)}")
    run_dir = output_dir / run_name
    overrides = [
        f"trainer.run_name={run_name}",
        f"trainer.ckpt_path={run_dir / 'ckpts'}",
        f"trainer.export_path={run_dir / 'exports'}",
        f"trainer.strategy={strategy}",
        f"generator.backend={backend}",
    ]
    if strategy == "single":
        return overrides
    if node.gpus_per_node < 1:
        raise BootstrapError("--strategy fsdp2 needs GPUs: SKYPILOT_NUM_GPUS_PER_NODE is 0")
    for role in ("policy", "ref") if ref_model else ("policy",):
        overrides += [
            f"trainer.placement.{role}_num_nodes={node.num_nodes}",
            f"trainer.placement.{role}_num_gpus_per_node={node.gpus_per_node}",
        ]
    if backend == "hf":
        return overrides + ["trainer.placement.colocate_all=false"]
    total_gpus = node.num_nodes * node.gpus_per_node
    if engine_tensor_parallel_size < 1 or total_gpus % engine_tensor_parallel_size:
        raise BootstrapError(
            f"--engine-tp {engine_tensor_parallel_size} does not divide the cluster's {total_gpus} GPUs "
            f"({node.num_nodes} nodes x {node.gpus_per_node})"
        )
    return overrides + [
        f"generator.num_inference_engines={total_gpus // engine_tensor_parallel_size}",
        f"generator.inference_engine_tensor_parallel_size={engine_tensor_parallel_size}",
    ]


# ------------------------------------------------------------------------------------------------ Ray


def ray_auth_env(environ: Mapping[str, str], node: NodeInfo) -> dict[str, str]:
    """RAY_AUTH_MODE and RAY_AUTH_TOKEN for every Ray process and the job: token auth, with `environ`'s token, or a
    fresh one on a single node (see the module doc)."""
    token = environ.get("RAY_AUTH_TOKEN", "")
    if not token:
        if node.num_nodes > 1:
            raise BootstrapError(
                f"RAY_AUTH_TOKEN is empty, and the {node.num_nodes} nodes of this task need one shared token for Ray's "
                "token auth: launch with tasks/launch/launch.sh (it generates one), or pass --secret RAY_AUTH_TOKEN"
            )
        token = secrets.token_hex(32)
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}


def ray_start_command(node: NodeInfo, extra_args: Sequence[str]) -> list[str]:
    """`ray start --block` for this node: the head on rank 0, a worker joining it elsewhere."""
    ray = str(Path(sys.executable).with_name("ray"))
    role = ["--head", f"--port={node.ray_port}"] if node.rank == 0 else [f"--address={node.head_address}"]
    ip = node.ips[node.rank]
    return [ray, "start", "--block", *role, f"--node-ip-address={ip}", f"--num-gpus={node.gpus_per_node}", *extra_args]


def _port_open(host: str, port: int, timeout: float = 2.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _wait(condition, timeout: float, what: str, ray_proc: subprocess.Popen | None = None, poll: float = 1.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if ray_proc is not None and ray_proc.poll() is not None:
            raise BootstrapError(f"{what}: this node's `ray start` exited with status {ray_proc.returncode}")
        if time.monotonic() > deadline:
            raise BootstrapError(f"{what}: not done after {timeout:.0f} s")
        time.sleep(poll)


def alive_nodes(address: str) -> int:
    """Alive nodes of the Ray cluster at `address` (a short-lived driver connection); 0 while it refuses drivers."""
    import ray

    try:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    except ConnectionError:  # the GCS port is open before the head accepts drivers
        return 0
    try:
        return sum(1 for n in ray.nodes() if n.get("Alive"))
    finally:
        ray.shutdown()


def _stop(proc: subprocess.Popen, timeout: float = 30.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ------------------------------------------------------------------------------------------------ roles


def _tee(proc: subprocess.Popen, log_file: Path) -> None:
    with open(log_file, "ab") as log:
        for line in iter(proc.stdout.readline, b""):
            sys.stdout.buffer.write(line)
            sys.stdout.flush()
            log.write(line)
            log.flush()


def run_head(node: NodeInfo, command: list[str], overrides: list[str], log_file: Path, env: dict, wait_s: float) -> int:
    """Start the head, wait for every node, run the job with RAY_ADDRESS set; return the job's exit status."""
    ray_proc = subprocess.Popen(ray_start_command(node, shlex.split(env.get("SKYRL_RAY_START_ARGS", ""))), env=env)
    try:
        _wait(lambda: _port_open(node.head_ip, node.ray_port), wait_s, "Ray head", ray_proc)
        os.environ.update(env)  # the waiting driver connects with the same auth mode as the nodes
        _wait(
            lambda: alive_nodes(node.head_address) >= node.num_nodes,
            wait_s,
            f"waiting for {node.num_nodes} nodes at {node.head_address}",
            ray_proc,
            poll=2.0,
        )
        print(f"bootstrap: {node.num_nodes} node(s) joined {node.head_address}; running the job", flush=True)
        log_file.parent.mkdir(parents=True, exist_ok=True)
        job_env = {**env, "RAY_ADDRESS": node.head_address}
        job = subprocess.Popen([*command, *overrides], env=job_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        forward = threading.Thread(target=_tee, args=(job, log_file), daemon=True)
        forward.start()
        signal.signal(signal.SIGTERM, lambda *_: job.send_signal(signal.SIGTERM))
        status = job.wait()
        forward.join()
        print(f"bootstrap: job exited with status {status}; log: {log_file}", flush=True)
        return status
    finally:
        _stop(ray_proc)


def run_worker(node: NodeInfo, env: dict, wait_s: float, gone_checks: int = 3, poll: float = 2.0) -> int:
    """Join the head and stay until it is gone; 0 when the head went away, else `ray start`'s failure status."""
    _wait(lambda: _port_open(node.head_ip, node.ray_port), wait_s, f"waiting for the Ray head at {node.head_address}")
    ray_proc = subprocess.Popen(ray_start_command(node, shlex.split(env.get("SKYRL_RAY_START_ARGS", ""))), env=env)
    try:
        misses = 0
        while misses < gone_checks:
            time.sleep(poll)
            misses = 0 if _port_open(node.head_ip, node.ray_port) else misses + 1
            if ray_proc.poll() is not None and misses == 0:
                print(f"bootstrap: ray start exited with {ray_proc.returncode} while the head is up", flush=True)
                return ray_proc.returncode or 1
        print(f"bootstrap: head {node.head_address} is gone; node {node.rank} leaves", flush=True)
        return 0
    finally:
        _stop(ray_proc)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", required=True, help="task name; the default run name is {task}-{UTC time}")
    parser.add_argument("--strategy", default="single", help=f"trainer.strategy: {' or '.join(STRATEGIES)}")
    parser.add_argument("--backend", default="hf", help=f"generator.backend: {' or '.join(BACKENDS)}")
    parser.add_argument("--engine-tp", type=int, default=1, help="GPUs per vLLM engine (fsdp2 placement)")
    parser.add_argument(
        "--ref-model",
        action="store_true",
        help="the job's reference is a model of its own (full fine-tuning with a KL term): place it like the policy",
    )
    parser.add_argument("--wait-seconds", type=float, default=600.0, help="how long to wait for the head and nodes")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the job's command (run on rank 0)")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    # SIGTERM (sky cancel, sky down) unwinds through the `finally` blocks, which stop this node's Ray; while the job
    # runs, the head forwards it to the job instead.
    signal.signal(signal.SIGTERM, lambda signum, _: sys.exit(128 + signum))
    try:
        node = node_info(os.environ)
        run_name = os.environ.get("RUN_NAME") or default_run_name(args.task)
        output_dir = Path(os.environ.get("SKYRL_OUTPUT_DIR", "~/skyrl_runs")).expanduser()
        overrides = job_overrides(
            node,
            run_name,
            output_dir,
            strategy=args.strategy,
            backend=args.backend,
            engine_tensor_parallel_size=args.engine_tp,
            ref_model=args.ref_model,
        )
        log_file = output_dir / run_name / "job.log"
        if os.environ.get("SKYRL_BOOTSTRAP_DRY_RUN") == "1":
            print(json.dumps({"command": command, "overrides": overrides, "log_file": str(log_file)}))
            return 0
        env = {**os.environ, **ray_auth_env(os.environ, node)}
        if node.rank != 0:
            return run_worker(node, env, args.wait_seconds)
        if not command:
            raise BootstrapError("no job command after --")
        print(f"bootstrap: run {run_name!r}, {node.num_nodes} node(s) x {node.gpus_per_node} GPU(s)", flush=True)
        return run_head(node, command, overrides, log_file, env, args.wait_seconds)
    except BootstrapError as e:
        print(f"bootstrap: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
