"""Loading: base YAML + Hydra-style overrides -> typed SkyRLConfig; unknown keys and bad types are errors."""

import copy
import pickle

import pytest
from omegaconf import DictConfig

from skyrl_train.config import CONFIG_DIR, CONFIG_NAME, ConfigError, SkyRLConfig, build_config, load_config, to_dict


def test_overrides_apply_with_their_types():
    cfg = load_config(["trainer.epochs=3", "trainer.policy.optimizer_config.lr=2e-5", "data.val_data=[]"])
    assert cfg.trainer.epochs == 3
    assert cfg.trainer.policy.optimizer_config.lr == 2e-5
    assert cfg.data.val_data == []


def test_int_given_for_float_key_becomes_float_and_number_for_str_key_becomes_str():
    cfg = load_config(["trainer.algorithm.gamma=1", "trainer.run_name=2024"])
    assert cfg.trainer.algorithm.gamma == 1.0 and isinstance(cfg.trainer.algorithm.gamma, float)
    assert cfg.trainer.run_name == "2024"


def test_interpolated_defaults_follow_the_policy_path_and_prompt_length():
    cfg = load_config(["trainer.policy.model.path=/models/tiny", "trainer.max_prompt_length=64"])
    assert cfg.generator.model_name == "/models/tiny"
    assert cfg.trainer.ref.model.path == "/models/tiny"
    assert cfg.generator.max_input_length == 64


def test_interpolation_in_an_override_resolves():
    cfg = load_config(["trainer.run_name=${trainer.project_name}_run"])
    assert cfg.trainer.run_name == "skyrl_run"


def test_explicit_ref_path_wins_over_the_interpolation():
    cfg = load_config(["trainer.ref.model.path=/models/ref"])
    assert (cfg.trainer.ref.model.path, cfg.trainer.policy.model.path) == ("/models/ref", "smollm2-135m-instruct")


def test_plus_adds_a_key_under_a_free_form_dict():
    cfg = load_config(["+trainer.policy.model_config_kwargs.attn_implementation=sdpa"])
    assert cfg.trainer.policy.model_config_kwargs == {"attn_implementation": "sdpa"}


def test_plus_on_an_existing_key_is_an_error():
    with pytest.raises(ConfigError, match=r"Cannot add 'trainer.epochs'"):
        load_config(["+trainer.epochs=2"])


def test_tilde_resets_a_declared_key_to_its_default():
    assert load_config(["~trainer.seed"]).trainer.seed == 42


def test_per_env_block_is_looked_up_by_env_id():
    overrides = ["+environment.skyrl_gym.my_env.api_url=http://x", "environment.skyrl_gym.text2sql.db_path=/db"]
    cfg = load_config(overrides, validate=False)  # validation refuses a block of an unregistered env
    gym = cfg.environment.skyrl_gym
    assert gym.my_env.api_url == "http://x"
    assert gym.get_env_config("text2sql").db_path == "/db"
    assert gym.get_env_config("gsm8k") == {}
    assert getattr(gym, "gsm8k", {}) == {}


def test_extra_sampling_params_are_kept_for_the_engine():
    cfg = load_config(["+generator.sampling_params.ignore_eos=true"])
    assert cfg.generator.sampling_params.additional_kwargs == {"ignore_eos": True}


def test_extra_sampling_params_the_engine_does_not_read_are_refused():
    with pytest.raises(ConfigError) as e:
        load_config(["+generator.eval_sampling_params.presence_penalty=0.5"])
    assert e.value.problems == [
        "generator.eval_sampling_params.presence_penalty is not implemented in this fork: the hf engine would ignore "
        "it (extra sampling keys it reads: ignore_eos)."
    ]


def test_logger_accepts_a_string_or_a_list():
    assert load_config(["trainer.logger=jsonl"]).trainer.logger == "jsonl"
    assert load_config(["trainer.logger=[console,tensorboard]"]).trainer.logger == ["console", "tensorboard"]


def test_unknown_key_names_the_full_key_and_suggests_the_nearest():
    with pytest.raises(ConfigError) as e:
        load_config(["trainer.polcy.model.path=x"])
    assert str(e.value) == "Unknown config key 'trainer.polcy.model.path'. Did you mean 'trainer.policy.model.path'?"


def test_unknown_key_added_with_plus_is_also_an_error():
    with pytest.raises(
        ConfigError, match=r"Unknown config key 'generator.max_turn'. Did you mean 'generator.max_turns'"
    ):
        load_config(["+generator.max_turn=3"])


def test_near_miss_in_an_open_block_is_an_error():
    with pytest.raises(ConfigError, match=r"'generator.sampling_params.temprature'. Did you mean .*temperature'"):
        load_config(["generator.sampling_params.temprature=0.5"])


def test_dropped_upstream_key_says_why():
    with pytest.raises(ConfigError, match=r"'trainer.policy.megatron_config.tensor_model_parallel_size': the Megatron"):
        load_config(["trainer.policy.megatron_config.tensor_model_parallel_size=2"])


def test_type_error_names_the_key_and_the_expected_type():
    with pytest.raises(ConfigError) as e:
        load_config(["trainer.train_batch_size=abc"])
    assert str(e.value) == "trainer.train_batch_size: expected int, got str 'abc'"


def test_bool_is_not_accepted_for_an_int():
    with pytest.raises(ConfigError, match=r"generator.max_turns: expected int, got bool True"):
        load_config(["generator.max_turns=true"])


def test_unknown_keys_inside_a_dict_value_are_named_by_full_key():
    with pytest.raises(ConfigError, match=r"Unknown config key 'trainer.policy.model.lora.rnak'"):
        load_config(["trainer.policy.model.lora={rnak: 8}"])


def test_all_load_problems_are_reported_together():
    with pytest.raises(ConfigError) as e:
        load_config(["trainer.polcy.model.path=x", "trainer.epochs=abc", "generator.n_samples_per_prompt=[1]"])
    assert len(e.value.problems) == 3
    assert "3 config problems" in str(e.value)


def test_sweeps_are_rejected():
    with pytest.raises(ConfigError, match="sweeps"):
        load_config(["trainer.seed=1,2"])


def test_build_config_accepts_a_hydra_composed_dictconfig():
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        composed = compose(config_name=CONFIG_NAME, overrides=["trainer.epochs=2"])
    assert isinstance(composed, DictConfig)
    cfg = build_config(composed)
    assert cfg == load_config(["trainer.epochs=2"], validate=False)


def test_config_built_in_python_has_interpolations_resolved():
    cfg = SkyRLConfig()
    assert cfg.generator.model_name == cfg.trainer.policy.model.path == "smollm2-135m-instruct"
    assert cfg.generator.max_input_length == 512


def test_to_dict_round_trips_and_config_pickles():
    cfg = load_config(
        ["+environment.skyrl_gym.my_env.k=1", "+generator.sampling_params.ignore_eos=true"], validate=False
    )
    assert build_config(to_dict(cfg)) == cfg
    assert pickle.loads(pickle.dumps(cfg)) == cfg
    assert copy.deepcopy(cfg) == cfg
