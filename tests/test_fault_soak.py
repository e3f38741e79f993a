"""`benchmarks/fault_soak.py`: how its fault budget splits, its MCP relay against the real market server, and (slow)
a short soak: 4 steps of the main job's recipe on the tiny model with a dozen faults of every kind, nothing lost.

    .venv/bin/pytest -m slow tests/test_fault_soak.py   (about 2-4 minutes on a shared 2-core machine)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SOAK_SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "fault_soak.py"


@pytest.fixture(scope="module")
def fault_soak(load_benchmark):
    with load_benchmark("fault_soak") as module:
        yield module


def test_the_full_budget_splits_200_faults_in_the_stated_shares(fault_soak):
    assert fault_soak.fault_budget(200) == {
        "malformed_call": 45,
        "s3_error": 45,
        "tool_output_1mb": 30,
        "mcp_kill": 30,
        "mcp_hang": 15,
        "engine_kill": 15,
        "trainer_kill": 10,
        "s3_kill_mid_upload": 5,
        "disk_full": 5,
    }


def test_a_dozen_faults_give_every_kind_at_least_one(fault_soak):
    assert fault_soak.fault_budget(12) == {
        "malformed_call": 1,
        "s3_error": 2,
        "tool_output_1mb": 2,
        "mcp_kill": 2,
        "mcp_hang": 1,
        "engine_kill": 1,
        "trainer_kill": 1,
        "s3_kill_mid_upload": 1,
        "disk_full": 1,
    }


def test_a_negative_budget_is_refused(fault_soak):
    with pytest.raises(ValueError, match="--faults must be >= 0, got -1"):
        fault_soak.fault_budget(-1)


def _rpc(relay: subprocess.Popen, message: dict) -> dict:
    relay.stdin.write((json.dumps(message) + "\n").encode())
    relay.stdin.flush()
    return json.loads(relay.stdout.readline())


def test_the_relay_replaces_one_armed_tool_result_with_one_mib(fault_soak, tmp_path):
    for folder in ("mcp_pids", "arm_1mb"):
        (tmp_path / folder).mkdir()
    (tmp_path / "arm_1mb" / "token").touch()
    relay = subprocess.Popen(
        [sys.executable, str(SOAK_SCRIPT), "mcp-relay", str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}
        assert "result" in _rpc(relay, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init})
        relay.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        call = {"name": "search_tickers", "arguments": {"query": "Northwind"}}
        first = _rpc(relay, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call})
        second = _rpc(relay, {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": call})
        (pid,) = [int(p.name) for p in (tmp_path / "mcp_pids").iterdir()]  # the real server, a child of the relay
    finally:
        relay.stdin.close()
        relay.wait(30)
    assert first["result"]["content"] == [{"type": "text", "text": "x" * (1 << 20)}]
    assert "NWGD" in second["result"]["content"][0]["text"]  # the token was used up: the server's own answer
    assert [json.loads(line)["kind"] for line in (tmp_path / "events.jsonl").read_text().splitlines()] == [
        "tool_output_1mb"
    ]
    assert pid != relay.pid


@pytest.mark.slow
def test_a_short_soak_survives_every_fault_it_injects_and_loses_nothing(fault_soak, tmp_path):
    args = fault_soak.parse_args(["--steps", "4", "--faults", "12", "--eval-interval", "2", "--workdir", str(tmp_path)])
    soak, outcome = fault_soak.run_soak(args)
    print(fault_soak.format_table(soak, outcome))
    assert outcome.problems == []
    assert soak.pointer_history[-1] == 4  # (the checkpoint tmpfs is unmounted by now)
    assert soak.tally.survived == soak.tally.injected
    assert sum(soak.tally.injected.values()) >= 9
    assert soak.tally.injected["trainer_kill"] == 1
    assert len(soak.launches) >= 2  # at least the kill's resume
