"""skyrl_integrations works where torch, Ray and skyrl-train cannot be imported (its dependencies are skyrl-gym and
light packages; only the features of the `train` extra need skyrl-train).

Each test runs Python in a subprocess whose `sitecustomize` (first on PYTHONPATH) installs an import hook that
refuses those packages; the bundled MCP server of the round trip gets the same hook through its `env`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REFUSED = ("ray", "skyrl_train", "torch")
NEEDS_TRAIN_EXTRA = "skyrl_integrations.datasets.validate"

IMPORT_HOOK = f"""
import sys


class RefuseModules:
    refused = frozenset({REFUSED!r})

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.refused:
            raise ModuleNotFoundError(f"No module named {{name!r}} (refused by the test's import hook)", name=name)
        return None


sys.meta_path.insert(0, RefuseModules())
"""


@pytest.fixture
def hook_dir(tmp_path) -> Path:
    """A folder holding the refusing `sitecustomize.py`, to put first on PYTHONPATH."""
    (tmp_path / "sitecustomize.py").write_text(IMPORT_HOOK)
    return tmp_path


@pytest.fixture
def run_without_train(hook_dir):
    """Factory: `run(code)` runs `code` in a fresh interpreter with the hook and returns its stdout."""

    def run(code: str) -> str:
        pythonpath = os.pathsep.join(filter(None, [str(hook_dir), os.environ.get("PYTHONPATH")]))
        result = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            env={**os.environ, "PYTHONPATH": pythonpath},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr[-4000:]
        return result.stdout

    return run


def test_the_hook_refuses_torch_ray_and_skyrl_train(run_without_train):
    out = run_without_train(f"""
        import importlib

        for name in {REFUSED!r}:
            try:
                importlib.import_module(name)
            except ModuleNotFoundError as exc:
                print(exc.name)
        """)
    assert out.split() == ["ray", "skyrl_train", "torch"]


def test_every_module_but_the_validator_imports(run_without_train):
    out = run_without_train(f"""
        import importlib, json, pkgutil
        import skyrl_integrations

        names = [
            info.name
            for info in pkgutil.walk_packages(skyrl_integrations.__path__, "skyrl_integrations.")
            if not info.name.endswith(".__main__") and info.name != {NEEDS_TRAIN_EXTRA!r}
        ]
        for name in names:
            importlib.import_module(name)
        print(json.dumps(names))
        """)
    imported = set(json.loads(out))
    assert {
        "skyrl_integrations.tool_parser",
        "skyrl_integrations.mcp.client",
        "skyrl_integrations.mcp.config",
        "skyrl_integrations.mcp.env",
        "skyrl_integrations.analysis.cli",
        "skyrl_integrations.datasets.llm_based",
    } <= imported


def test_the_validator_names_the_train_extra(run_without_train):
    out = run_without_train(f"""
        try:
            import {NEEDS_TRAIN_EXTRA}
        except ModuleNotFoundError as exc:
            print(exc)
        """)
    assert out == (
        "skyrl_integrations.datasets.validate (skyrl-validate-data) needs the 'train' extra (module 'skyrl_train' "
        "is not installed): pip install 'skyrl-integrations-toolfork[train]'\n"
    )


def test_a_parsed_tool_call_runs_on_a_bundled_server(run_without_train, hook_dir):
    # The env parses the reply, calls the bundled python server (a real process, with the hook too) and scores.
    out = run_without_train(f"""
        import json
        import skyrl_gym
        from skyrl_integrations.tool_parser import parse_tool_calls

        reply = 'Let me compute. <tool_call>{{"name": "run_python", "arguments": {{"code": "print(6 * 7)"}}}}</tool_call>'
        truth = {{
            "task_id": "light-0001",
            "complexity": "single",
            "max_turns": 2,
            "success": {{"must_call_tool": True, "expected_answer": "42", "answer_match": "numeric"}},
            "tool_sequence": [{{"step": 1, "server": "python", "tool": "run_python", "params": {{"code": "print(6 * 7)"}}}}],
            "limits": {{"max_servers": 1, "max_tools": 1}},
        }}
        server = {{"name": "python", "bundled": "python", "env": {{"PYTHONPATH": {str(hook_dir)!r}}}}}
        env = skyrl_gym.make(
            "mcp_tool",
            env_config={{"servers": [server]}},
            extras={{
                "reward_spec": {{"method": "rule", "ground_truth": truth}},
                "extra_info": {{"servers": ["python"], "split": "train", "index": 0}},
                "max_turns": 2,
            }},
        )
        env.init([{{"role": "user", "content": "What is 6 * 7?"}}])
        call = env.step(reply)
        answer = env.step("42")
        env.close()
        parsed = parse_tool_calls(reply)
        print(json.dumps({{
            "parsed": [[c.name, c.arguments] for c in parsed.calls],
            "observation": call["observations"][0]["content"].split("\\n\\n")[0],
            "answer": [answer["done"], answer["reward"]],
        }}))
        """)
    assert json.loads(out) == {
        "parsed": [["run_python", {"code": "print(6 * 7)"}]],
        "observation": 'Tool result (run_python):\n{"exit_code":0,"stdout":"42\\n","stderr":""}',
        "answer": [True, 1.0],
    }
