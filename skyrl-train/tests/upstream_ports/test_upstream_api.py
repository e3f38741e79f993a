"""Upstream skyrl-train's extension API, piece by piece, without Ray or a model (`test_upstream_ports.py` runs whole
scripts): hydra's config from `config_dir`, `validate_cfg` on it, keys added with `+`, the trainer's upstream
constructor, and the registrations `initialize_ray` hands to its workers."""

from __future__ import annotations

import pickle

import pytest
import ray.cloudpickle
from hydra import compose, initialize_config_dir

from skyrl_train.config import ConfigError, SkyRLConfig, added_keys
from skyrl_train.config.schema import AddedKeys
from skyrl_train.entrypoints import ray_task
from skyrl_train.entrypoints.main_base import BasePPOExp, config_dir, validate_cfg
from skyrl_train.entrypoints.ray_task import WorkerSetup
from skyrl_train.trainer import RayPPOTrainer
from skyrl_train.utils import initialize_ray
from skyrl_train.utils.ppo_utils import PolicyLossRegistry, register_policy_loss


def hydra_config(*overrides: str):
    """The DictConfig `@hydra.main(config_path=config_dir, config_name="ppo_base_config")` gives a script."""
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose("ppo_base_config", overrides=list(overrides))


def test_validate_cfg_types_hydras_config_with_the_keys_a_script_adds():
    cfg = hydra_config(
        "trainer.epochs=3",
        "+trainer.algorithm.overlong_buffer.len=512",
        "+trainer.algorithm.overlong_buffer.penalty_factor=1.0",
        "+generator.miniswe_traj_dir=/tmp/trajs",
    )
    typed = validate_cfg(cfg)
    assert isinstance(typed, SkyRLConfig) and typed.trainer.epochs == 3
    assert typed.generator.model_name == typed.trainer.policy.model.path  # hydra's interpolation, resolved
    assert typed.trainer.algorithm.overlong_buffer.len == 512  # read as upstream's custom trainer reads it
    assert typed.trainer.algorithm.get("overlong_buffer").penalty_factor == 1.0
    assert typed.generator.miniswe_traj_dir == "/tmp/trajs"
    assert typed.generator.get("no_such_key", "default") == "default"
    assert added_keys(typed) == {
        "trainer.algorithm.overlong_buffer.len": 512,
        "trainer.algorithm.overlong_buffer.penalty_factor": 1.0,
        "generator.miniswe_traj_dir": "/tmp/trajs",
    }
    assert pickle.loads(pickle.dumps(typed)).trainer.algorithm.overlong_buffer.len == 512  # it goes to the Ray task


def test_a_key_added_outside_the_blocks_that_keep_them_is_refused_naming_it():
    with pytest.raises(ConfigError) as error:
        validate_cfg(hydra_config("+data.my_option=1"))
    assert error.value.problems == [
        "Unknown config key 'data.my_option'. Keys of your own code may be added under trainer.algorithm and generator "
        "only."
    ]


def test_an_added_key_that_misspells_a_declared_one_is_refused():
    with pytest.raises(ConfigError) as error:
        validate_cfg(hydra_config("+trainer.algorithm.eps_clip_hihg=0.28"))
    assert error.value.problems == [
        "Unknown config key 'trainer.algorithm.eps_clip_hihg'. Did you mean 'trainer.algorithm.eps_clip_high'?"
    ]


def test_validate_cfg_names_every_bad_key_of_hydras_config():
    with pytest.raises(ConfigError) as error:
        validate_cfg(hydra_config("trainer.train_batch_size=3", "trainer.policy_mini_batch_size=2"))
    assert any("trainer.train_batch_size" in p and "trainer.policy_mini_batch_size" in p for p in error.value.problems)


def test_what_names_a_registration_is_checked_where_the_script_registers_it():
    # A script may register its env or loss in the Ray task: the driver's validate_cfg leaves those checks to
    # BasePPOExp there.
    cfg = hydra_config(
        "+environment.skyrl_gym.upstream_ports_env.reward=1", "trainer.algorithm.policy_loss_type=loss_of_the_task"
    )
    validate_cfg(cfg)
    with pytest.raises(ConfigError) as error:
        BasePPOExp(cfg)
    assert [p.split(":")[0].split("=")[0] for p in error.value.problems] == [
        "trainer.algorithm.policy_loss_type",
        "environment.skyrl_gym.upstream_ports_env",
    ]


def test_added_key_blocks_read_like_a_dictconfig():
    assert issubclass(type(SkyRLConfig().trainer.algorithm), AddedKeys)
    with pytest.raises(AttributeError, match="AlgorithmConfig has no key 'overlong_buffer'"):
        SkyRLConfig().trainer.algorithm.overlong_buffer  # noqa: B018


def test_ray_ppo_trainer_takes_upstreams_arguments_only_while_a_run_is_built():
    cfg = validate_cfg(hydra_config())
    with pytest.raises(RuntimeError, match="can only be built in BasePPOExp.get_trainer"):
        RayPPOTrainer(
            cfg=cfg,
            tracker=None,
            tokenizer=None,
            train_dataset=None,
            eval_dataset=None,
            inference_engine_client=None,
            generator=None,
            colocate_pg=None,
        )


def _upstream_style_loss(log_probs, old_log_probs, advantages, config, loss_mask=None):
    return (-log_probs * advantages).mean(), 0.0


def test_initialize_ray_hands_the_drivers_custom_registrations_to_every_worker():
    assert initialize_ray is ray_task.initialize_ray  # upstream's `from skyrl_train.utils import initialize_ray`
    register_policy_loss("upstream_ports_loss")(_upstream_style_loss)
    try:
        setup = WorkerSetup.of_this_process()
        assert setup.policy_losses["upstream_ports_loss"] is _upstream_style_loss
        assert "regular" not in setup.policy_losses and "grpo" not in setup.advantage_estimators  # built-ins: not
        shipped = ray.cloudpickle.loads(ray.cloudpickle.dumps(setup))  # as Ray ships the setup hook
        PolicyLossRegistry.unregister("upstream_ports_loss")  # a worker process: it never ran the registration
        shipped()
        assert PolicyLossRegistry.get("upstream_ports_loss") is _upstream_style_loss
        shipped()  # a worker that imported the registering module too: the same function, no error
    finally:
        PolicyLossRegistry.unregister("upstream_ports_loss")
