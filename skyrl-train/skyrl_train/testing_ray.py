"""Real Ray clusters for tests.

    from skyrl_train.testing_ray import local_ray, two_node_ray  # noqa: F401

- `local_ray` (module): a local cluster of this process (``ray.init`` with 4 logical CPUs); shut down afterwards.
- `FSDP2_CPU_OVERRIDES`, `subprocess_env()`: for tests that run the entrypoint with ``trainer.strategy=fsdp2``.
- `two_node_ray` (module): two Ray nodes on this machine, each with 4 fake GPUs and 4 CPUs, started with
  ``ray start --head`` and ``ray start --address`` (distinct ports) as on a real cluster; this process connects as
  a driver. Both ``ray start --block`` processes run in a session of their own, and teardown signals exactly those
  process groups, so no other Ray on the machine is touched.

Both unset ``RAY_ADDRESS`` and set ``RAY_AUTH_MODE=disabled``: the clusters are private to the test and short-lived,
and a test must not write a token into the home directory (see ``skyrl_train.distributed.cluster``).
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
FSDP2_CPU_OVERRIDES = [
    "trainer.strategy=fsdp2",
    "trainer.placement.colocate_all=false",
    "trainer.placement.policy_num_gpus_per_node=2",
    "trainer.placement.ref_num_gpus_per_node=2",
]
"""The fsdp2 overrides for a CPU machine (docs/distributed.md): 2 policy ranks, not colocated with the engine."""


def subprocess_env(**extra: str) -> dict[str, str]:
    """This process's environment for a training subprocess that starts its own local cluster: ``TEST_ENV`` set,
    ``RAY_ADDRESS`` removed, plus ``extra``."""
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    return {**env, **TEST_ENV, **extra}


NODE_GPUS = 4
NODE_CPUS = 4


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _node_ports() -> list[str]:
    """Every port a node binds, chosen free, so two nodes on one machine do not collide."""
    return [
        f"--node-manager-port={_free_port()}",
        f"--object-manager-port={_free_port()}",
        f"--dashboard-agent-listen-port={_free_port()}",
        f"--dashboard-agent-grpc-port={_free_port()}",
        f"--runtime-env-agent-port={_free_port()}",
        f"--metrics-export-port={_free_port()}",
        f"--worker-port-list={','.join(str(_free_port()) for _ in range(32))}",
    ]


def _isolate_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    for key, value in TEST_ENV.items():
        monkeypatch.setenv(key, value)


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    import ray

    with pytest.MonkeyPatch.context() as monkeypatch:
        _isolate_env(monkeypatch)
        ray.shutdown()
        ray.init(address="local", num_cpus=NODE_CPUS, include_dashboard=False)
        try:
            yield
        finally:
            ray.shutdown()


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


@pytest.fixture(scope="module")
def two_node_ray() -> Iterator[str]:
    """Yields the head's GCS address; this process is connected to it as a driver."""
    import ray

    ray_cli = str(Path(sys.executable).with_name("ray"))
    resources = [f"--num-gpus={NODE_GPUS}", f"--num-cpus={NODE_CPUS}", "--block", "--disable-usage-stats"]
    processes: list[subprocess.Popen] = []
    with pytest.MonkeyPatch.context() as monkeypatch, tempfile.TemporaryDirectory(prefix="ray", dir="/tmp") as logs:
        _isolate_env(monkeypatch)
        ray.shutdown()
        address = f"127.0.0.1:{_free_port()}"

        def start(*args: str, log: str) -> None:
            path = Path(logs) / log
            with open(path, "w") as out:
                process = subprocess.Popen(
                    [ray_cli, "start", *args, *resources, *_node_ports()],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=dict(os.environ),
                    start_new_session=True,
                )
            processes.append(process)
            _wait_for_start(path, process)

        try:
            start("--head", f"--port={address.split(':')[1]}", "--include-dashboard=false", log="head.log")
            start(f"--address={address}", log="worker.log")
            ray.init(address=address)
            _wait_for_nodes(2)
            yield address
        finally:
            ray.shutdown()
            for process in reversed(processes):
                _stop(process)


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
