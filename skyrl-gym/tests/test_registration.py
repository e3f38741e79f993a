"""register / make / spec / pprint_registry / EnvSpec."""

import pytest

import skyrl_gym
from skyrl_gym.envs.base_text_env import BaseTextEnv
from skyrl_gym.envs.registration import EnvSpec
from skyrl_gym.error import Error, RegistrationError


class EchoEnv(BaseTextEnv):
    def __init__(self, env_config=None, extras=None):
        super().__init__()
        self.env_config = env_config
        self.extras = extras or {}

    def step(self, action):
        return {"observations": [{"role": "user", "content": action}], "reward": 0.0, "done": True}


def test_builtin_envs_are_registered_on_import():
    assert {"gsm8k", "gsm8k_multi_turn", "text2sql"} <= set(skyrl_gym.registry)


def test_register_twice_is_an_error(clean_registry):
    skyrl_gym.register("echo", entry_point=EchoEnv)
    with pytest.raises(RegistrationError, match="'echo' is already registered"):
        skyrl_gym.register("echo", entry_point=EchoEnv)


def test_register_requires_an_entry_point(clean_registry):
    with pytest.raises(RegistrationError, match="entry_point is required"):
        skyrl_gym.register("nothing", entry_point="")


def test_make_unknown_id_suggests_the_near_miss():
    with pytest.raises(Error, match=r"'gsm8kk'\. Did you mean 'gsm8k'\?.*pprint_registry"):
        skyrl_gym.make("gsm8kk")


def test_make_merges_spec_kwargs_with_call_kwargs_without_mutating_the_spec(clean_registry):
    skyrl_gym.register("echo", entry_point=EchoEnv, kwargs={"env_config": {"a": 1}, "extras": {"x": [1]}})
    env = skyrl_gym.make("echo", extras={"y": 2})
    assert env.env_config == {"a": 1}
    assert env.extras == {"y": 2}
    env.env_config["a"] = 99
    assert skyrl_gym.spec("echo").kwargs["env_config"] == {"a": 1}


def test_make_attaches_a_spec_with_the_effective_kwargs(clean_registry):
    skyrl_gym.register("echo", entry_point=EchoEnv, kwargs={"env_config": {"a": 1}})
    env = skyrl_gym.make("echo", extras={"y": 2})
    assert env.spec.id == "echo"
    assert env.spec.kwargs == {"env_config": {"a": 1}, "extras": {"y": 2}}
    assert env.spec is not skyrl_gym.spec("echo")


def test_string_entry_point_is_imported_lazily_at_make(clean_registry):
    skyrl_gym.register("ghost", entry_point="no_such_module_for_skyrl_tests:Ghost")
    with pytest.raises(ModuleNotFoundError, match="no_such_module_for_skyrl_tests"):
        skyrl_gym.make("ghost")


def test_malformed_entry_point_string_is_reported(clean_registry):
    skyrl_gym.register("bad", entry_point="just_a_module")
    with pytest.raises(Error, match="not of the form 'package.module:ClassName'"):
        skyrl_gym.make("bad")


def test_missing_attribute_in_entry_point_is_reported(clean_registry):
    skyrl_gym.register("bad", entry_point="skyrl_gym.envs.base_text_env:NoSuchEnv")
    with pytest.raises(Error, match="has no attribute 'NoSuchEnv'"):
        skyrl_gym.make("bad")


def test_constructor_type_error_names_the_env_and_kwargs(clean_registry):
    skyrl_gym.register("echo", entry_point=EchoEnv)
    with pytest.raises(TypeError, match=r"making env 'echo' with kwargs \['bogus'\]"):
        skyrl_gym.make("echo", bogus=1)


def test_entry_point_must_build_an_env(clean_registry):
    skyrl_gym.register("not_env", entry_point=lambda **_: object())
    with pytest.raises(TypeError, match="returned object, not a skyrl_gym.Env"):
        skyrl_gym.make("not_env")


def test_make_accepts_an_env_spec():
    env = skyrl_gym.make(EnvSpec(id="adhoc", entry_point=EchoEnv), extras={"k": 1})
    assert env.extras == {"k": 1}
    assert "adhoc" not in skyrl_gym.registry


def test_env_spec_json_round_trip():
    spec = EnvSpec(id="x", entry_point="pkg.mod:Cls", kwargs={"env_config": {"n": 3}})
    assert EnvSpec.from_json(spec.to_json()) == spec
    assert spec.name == "x"


def test_env_spec_with_callable_refuses_json():
    with pytest.raises(ValueError, match="callable entry point"):
        EnvSpec(id="x", entry_point=EchoEnv).to_json()


def test_deregister_removes_the_id(clean_registry):
    skyrl_gym.register("echo", entry_point=EchoEnv)
    skyrl_gym.deregister("echo")
    assert "echo" not in skyrl_gym.registry
    with pytest.raises(Error, match="not registered"):
        skyrl_gym.deregister("echo")


def test_pprint_registry_lists_ids_with_entry_points(capsys):
    text = skyrl_gym.pprint_registry(print_output=False)
    assert "gsm8k: skyrl_gym.envs.gsm8k.env:GSM8kEnv" in text.splitlines()
    skyrl_gym.pprint_registry()
    assert capsys.readouterr().out.strip() == text
