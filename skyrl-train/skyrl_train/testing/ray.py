"""Real Ray clusters for tests.

    from skyrl_train.testing.ray import local_ray, two_node_ray  # noqa: F401

- `local_ray` (module): a local cluster of this process (``ray.init`` with 4 logical CPUs, or 2 per GPU if that is
  more, and as many GPUs as torch sees); shut down afterwards. `local_cluster(num_cpus, num_gpus)` is the same
  as a context manager with resources of the caller's choosing.
- `machine_ranks(...)`: how many fsdp2 ranks a distributed test runs on this machine (one per GPU; 2 gloo ranks on
  CPU).
- `fsdp2_overrides()`, `subprocess_env()`: for tests that run the entrypoint with ``trainer.strategy=fsdp2``.
- `two_node_ray` (module): two Ray nodes on this machine, each with 4 fake GPUs and 4 CPUs, started with
  ``ray start --head`` and ``ray start --address`` (distinct ports) as on a real cluster; this process connects as
  a driver. Both ``ray start --block`` processes run in a session of their own, and teardown signals exactly those
  process groups, so no other Ray on the machine is touched. `ray_nodes(...)` is the same for any number of nodes,
  each with environment variables of its own.

Both unset ``RAY_ADDRESS`` and set ``RAY_AUTH_MODE=disabled``: the clusters are private to the test and short-lived,
and a test must not write a token into the home directory (see ``skyrl_train.utils.ray_cluster``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

TEST_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


def subprocess_env(**extra: str) -> dict[str, str]:
    """This process's environment for a training subprocess that starts its own local cluster: ``TEST_ENV`` set,
    ``RAY_ADDRESS`` removed, plus ``extra``."""
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    return {**env, **TEST_ENV, **extra}


NODE_GPUS = 4
NODE_CPUS = 4


def _free_ports(count: int) -> list[int]:
    """``count`` distinct free ports (all sockets are held open until every port is chosen)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]


PORTS_PER_NODE = 6 + 32


def _node_ports(ports: list[int]) -> list[str]:
    """``ray start`` arguments for every port a node binds, from ``PORTS_PER_NODE`` distinct free ``ports`` (chosen
    for all nodes at once: a port picked for one node's workers is not bound until a worker starts)."""
    return [
        f"--node-manager-port={ports[0]}",
        f"--object-manager-port={ports[1]}",
        f"--dashboard-agent-listen-port={ports[2]}",
        f"--dashboard-agent-grpc-port={ports[3]}",
        f"--runtime-env-agent-port={ports[4]}",
        f"--metrics-export-port={ports[5]}",
        f"--worker-port-list={','.join(str(port) for port in ports[6:])}",
    ]


def _isolate_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    for key, value in TEST_ENV.items():
        monkeypatch.setenv(key, value)


CPU_RANKS = 2
"""fsdp2 ranks per worker group of a distributed test on a machine without GPUs (gloo processes)."""


def machine_gpus() -> int:
    """The GPUs torch can use in this process (0 without CUDA)."""
    import torch

    return torch.cuda.device_count()


def machine_ranks(groups: int = 1, at_most: int = 4) -> int:
    """fsdp2 ranks per worker group for a distributed test on `local_ray`, when ``groups`` groups each need GPUs of
    their own: on a machine with GPUs, one rank per GPU (``machine_gpus() // groups``), rounded down to a power of two
    (so it divides the tests' batches) and at most ``at_most`` (0: fewer GPUs than groups); on CPU, `CPU_RANKS`."""
    gpus = machine_gpus()
    if gpus == 0:
        return CPU_RANKS
    ranks = min(gpus // groups, at_most)
    return 1 << (ranks.bit_length() - 1) if ranks else 0


def fsdp2_overrides() -> list[str]:
    """The fsdp2 overrides of an entrypoint run in a test (docs/distributed.md), for a LoRA policy as the tests train:
    `machine_ranks()` policy ranks (2 gloo processes on CPU, one per GPU up to 4), not colocated with the engine (the
    reference, when a KL term is on, is the policy with its adapter off)."""
    return [
        "trainer.strategy=fsdp2",
        "trainer.placement.colocate_all=false",
        f"trainer.placement.policy_num_gpus_per_node={machine_ranks()}",
    ]


@contextlib.contextmanager
def local_cluster(num_cpus: int, num_gpus: int) -> Iterator[None]:
    """A local Ray cluster of this process with ``num_cpus`` logical CPUs and ``num_gpus`` GPUs (told to Ray, not
    detected), in the test environment (``TEST_ENV``, no ``RAY_ADDRESS``); shut down afterwards."""
    import ray

    with pytest.MonkeyPatch.context() as monkeypatch:
        _isolate_env(monkeypatch)
        ray.shutdown()
        ray.init(address="local", num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False)
        try:
            yield
        finally:
            ray.shutdown()


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """Ray gets the GPUs torch sees (so placement and the ranks' device agree) and a CPU for each bundle of two
    worker groups of one rank per GPU."""
    gpus = machine_gpus()
    with local_cluster(max(NODE_CPUS, 2 * gpus), gpus):
        yield


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM the node's process group (``ray start`` and the raylet, GCS and workers it spawned), SIGKILL what
    is left after 5 s."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


@contextlib.contextmanager
def ray_nodes(
    node_envs: list[dict[str, str]], num_cpus: int = NODE_CPUS, num_gpus: int = NODE_GPUS, connect: bool = True
) -> Iterator[str]:
    """One Ray node per entry of ``node_envs`` on this machine (the first is the head), each started by ``ray start``
    with this process's environment plus its entry (e.g. a node-local setting such as ``SKYRL_NODE_CKPT_PATH``), with
    ``num_cpus`` CPUs and ``num_gpus`` fake GPUs. Yields the head's GCS address; with ``connect``, this process is
    a driver of the cluster meanwhile. Needs ``TEST_ENV`` in the environment (see ``two_node_ray``)."""
    import ray

    ray_cli = str(Path(sys.executable).with_name("ray"))
    resources = [f"--num-gpus={num_gpus}", f"--num-cpus={num_cpus}", "--block", "--disable-usage-stats"]
    processes: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="ray", dir="/tmp") as logs:
        gcs_port, *ports = _free_ports(1 + PORTS_PER_NODE * len(node_envs))
        address = f"127.0.0.1:{gcs_port}"

        def start(*args: str, log: str, env: dict[str, str]) -> None:
            path = Path(logs) / log
            node_ports = ports[PORTS_PER_NODE * len(processes) : PORTS_PER_NODE * (len(processes) + 1)]
            with open(path, "w") as out:
                process = subprocess.Popen(
                    [ray_cli, "start", *args, *resources, *_node_ports(node_ports)],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, **env},
                    start_new_session=True,
                )
            processes.append(process)
            _wait_for_start(path, process)

        try:
            head = ["--head", f"--port={address.split(':')[1]}", "--include-dashboard=false"]
            start(*head, log="head.log", env=node_envs[0])
            for index, env in enumerate(node_envs[1:], start=1):
                start(f"--address={address}", log=f"worker{index}.log", env=env)
            ray.init(address=address)
            _wait_for_nodes(len(node_envs))
            if not connect:
                ray.shutdown()
            yield address
        finally:
            ray.shutdown()
            for process in reversed(processes):
                _stop(process)


@pytest.fixture(scope="module")
def two_node_ray() -> Iterator[str]:
    """Yields the head's GCS address; this process is connected to it as a driver."""
    import ray

    with pytest.MonkeyPatch.context() as monkeypatch:
        _isolate_env(monkeypatch)
        ray.shutdown()
        with ray_nodes([{}, {}]) as address:
            yield address


def _wait_for_start(log: Path, process: subprocess.Popen) -> None:
    """Wait until ``ray start`` reports the node started; fail with its log if it exits first."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if "Ray runtime started" in log.read_text():
            return
        if process.poll() is not None:
            raise RuntimeError(f"`ray start` exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        time.sleep(0.5)
    raise TimeoutError(f"`ray start` did not report a started node within 120 s:\n{log.read_text()[-3000:]}")


def _wait_for_nodes(count: int) -> None:
    import ray

    deadline = time.monotonic() + 60
    while sum(node["Alive"] for node in ray.nodes()) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{count} Ray nodes did not join within 60 s: {ray.nodes()}")
        time.sleep(0.5)
