"""The per-env blocks of `environment.skyrl_gym`: named after a registered env, holding only the keys it declares."""

from __future__ import annotations

import pytest

import skyrl_gym
from skyrl_gym.envs import BaseTextEnv, BaseTextEnvStepOutput
from skyrl_train.config import ConfigError, load_config

REGISTERED = "gsm8k, gsm8k_multi_turn, mcp_tool, tau_bench, text2sql"
MCP_KEYS = (
    "allowed_tools, call_timeout_s, connect_timeout_s, demonstrations, last_turn_note, max_calls_per_turn, "
    "max_output_chars, retries, reward_weights, servers, strict_arguments, terminal_tools, tool_prompt"
)


def only_problem(*overrides: str) -> str:
    with pytest.raises(ConfigError) as error:
        load_config(list(overrides))
    (problem,) = error.value.problems
    return problem


def test_a_misspelled_env_block_is_refused_naming_the_block_and_the_registered_envs():
    assert only_problem("+environment.skyrl_gym.mcp_tools.max_calls_per_turn=1") == (
        "environment.skyrl_gym.mcp_tools: no env is registered under 'mcp_tools' (did you mean 'mcp_tool'?), so this "
        f"block would configure nothing; registered env ids: {REGISTERED} (a block configures the env of its id; "
        "register an env with skyrl_gym.register or the `skyrl_gym.envs` entry-point group)."
    )


def test_a_key_the_env_does_not_declare_is_refused_with_its_keys():
    assert only_problem("+environment.skyrl_gym.mcp_tool.max_call_per_turn=1") == (
        "environment.skyrl_gym.mcp_tool.max_call_per_turn: env 'mcp_tool' has no config key 'max_call_per_turn' (did "
        f"you mean 'max_calls_per_turn'?); its keys: {MCP_KEYS}."
    )


def test_the_keys_the_env_declares_are_accepted():
    cfg = load_config(["+environment.skyrl_gym.mcp_tool.max_calls_per_turn=1", "environment.env_class=mcp_tool"])
    assert cfg.environment.skyrl_gym.get_env_config("mcp_tool") == {"max_calls_per_turn": 1}


def test_a_gsm8k_block_is_refused_at_config_time():
    assert only_problem("+environment.skyrl_gym.gsm8k.format_score=0.1") == (
        "environment.skyrl_gym.gsm8k.format_score: env 'gsm8k' has no config key 'format_score'; its keys: none (it "
        "reads no config)."
    )


def test_the_gsm8k_env_refuses_a_config_it_would_ignore():
    with pytest.raises(ValueError) as error:
        skyrl_gym.make("gsm8k", env_config={"format_score": 0.1}, extras={"reward_spec": {"ground_truth": "4"}})
    assert str(error.value) == "env_config of GSM8kEnv: unknown key(s) ['format_score']; it takes no config keys"


def test_the_default_blocks_are_accepted_but_a_changed_block_of_an_unregistered_env_is_not():
    load_config([])  # the defaults hold blocks for text2sql, llm_as_a_judge and search
    assert only_problem("environment.skyrl_gym.search.topk=5").startswith(
        "environment.skyrl_gym.search: no env is registered under 'search', so this block would configure nothing"
    )


class UndeclaredEnv(BaseTextEnv):
    """An env written for upstream skyrl-gym: it declares no config keys."""

    def step(self, action):
        return BaseTextEnvStepOutput(observations=[], reward=0.0, done=True, metadata={})


class DeclaredEnv(UndeclaredEnv):
    env_config_keys = frozenset({"api_url"})


@pytest.fixture
def registered():
    ids = {"undeclared_test_env": UndeclaredEnv, "declared_test_env": DeclaredEnv}
    for env_id, cls in ids.items():
        skyrl_gym.register(env_id, cls)
    yield
    for env_id in ids:
        skyrl_gym.deregister(env_id)


def test_an_env_that_declares_no_keys_gets_its_block_unchecked(registered):
    cfg = load_config(["+environment.skyrl_gym.undeclared_test_env.anything=1"])
    assert cfg.environment.skyrl_gym.get_env_config("undeclared_test_env") == {"anything": 1}


def test_an_env_registered_in_code_before_loading_is_checked_against_its_declared_keys(registered):
    load_config(["+environment.skyrl_gym.declared_test_env.api_url=http://x"])
    assert only_problem("+environment.skyrl_gym.declared_test_env.api_uri=http://x") == (
        "environment.skyrl_gym.declared_test_env.api_uri: env 'declared_test_env' has no config key 'api_uri' (did "
        "you mean 'api_url'?); its keys: api_url."
    )


def test_the_built_in_envs_declare_the_keys_they_read():
    assert skyrl_gym.config_keys("gsm8k") == frozenset()
    assert skyrl_gym.config_keys("gsm8k_multi_turn") == frozenset()
    assert skyrl_gym.config_keys("text2sql") == frozenset({"db_path"})
    assert skyrl_gym.config_keys("mcp_tool") == frozenset(MCP_KEYS.split(", "))
