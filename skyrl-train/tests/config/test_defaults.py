"""Defaults are upstream SkyRL's (skyrl_upstream_contract.md §2.3) except the documented deviations."""

import dataclasses

import pytest

from skyrl_train.config import SkyRLConfig, load_config
from skyrl_train.config.render_yaml import UPSTREAM_DEVIATIONS, _scalar
from skyrl_train.config.schema import help_of
from skyrl_train.config.support import value_of


@pytest.fixture(scope="module")
def cfg():
    return load_config([])


@pytest.mark.parametrize(
    "key, upstream",
    [
        ("data.train_data", ["~/data/gsm8k/train.parquet"]),  # §2.3.1
        ("trainer.train_batch_size", 1024),  # §2.3.2
        ("trainer.policy_mini_batch_size", 256),
        ("trainer.eval_interval", 5),
        ("trainer.ckpt_path", "~/ckpts/"),
        ("trainer.resume_mode", "latest"),
        ("trainer.max_prompt_length", 512),
        ("trainer.seed", 42),
        ("trainer.placement.colocate_all", True),
        ("trainer.policy.model.path", "smollm2-135m-instruct"),  # upstream: Qwen/Qwen2.5-1.5B-Instruct; DESIGN §5
        ("trainer.policy.optimizer_config.lr", 1e-6),
        ("trainer.policy.optimizer_config.adam_betas", [0.9, 0.999]),
        ("trainer.critic.optimizer_config.lr", 5e-6),
        ("trainer.critic.model.path", None),
        ("trainer.policy.model.lora.alpha", 16),
        ("trainer.algorithm.advantage_estimator", "grpo"),  # §2.3.4
        ("trainer.algorithm.kl_loss_coef", 0.001),
        ("trainer.algorithm.use_kl_loss", True),
        ("trainer.algorithm.eps_clip_high", 0.2),
        ("trainer.algorithm.clip_ratio_c", 3.0),
        ("trainer.algorithm.sapo.tau_neg", 1.05),
        ("generator.n_samples_per_prompt", 5),  # §2.3.5
        ("generator.gpu_memory_utilization", 0.8),
        ("generator.remote_inference_engine_urls", ["127.0.0.1:8001"]),
        ("generator.sampling_params.max_generate_length", 1024),
        ("generator.sampling_params.top_k", -1),
        ("generator.sampling_params.logprobs", 0),
        ("generator.eval_sampling_params.temperature", 0.0),
        ("environment.env_class", "gsm8k"),  # §2.3.6
        ("environment.skyrl_gym.max_env_workers", 32),
        ("generator.trajectory_timeout_seconds", 900),  # fleet fork §2.2
        ("generator.inject_context_status", False),  # fleet fork §2.4
    ],
)
def test_default_matches_upstream(cfg, key, upstream):
    value = cfg
    for part in key.split("."):
        value = getattr(value, part)
    assert value == upstream


def test_deviating_defaults_are_the_documented_ones(cfg):
    assert [d[0] for d in UPSTREAM_DEVIATIONS] == [
        "trainer.policy.model.path",
        "trainer.strategy",
        "generator.backend",
        "trainer.logger",
        "trainer.use_sample_packing",
        "trainer.flash_attn",
        "trainer.policy.optimizer_config.offload_after_step",
        "trainer.critic.optimizer_config.offload_after_step",
        "trainer.fully_async.max_staleness_steps",
        "sft.train_on_what",
    ]
    for key, upstream, ours, _ in UPSTREAM_DEVIATIONS:
        assert (_scalar(value_of(cfg, key)), upstream != ours) == (ours, True), key


def test_s3_block_defaults_to_off(cfg):
    s3 = cfg.trainer.s3
    assert (s3.bucket, s3.prefix, s3.endpoint_url, s3.region) == (None, None, None, None)
    assert (s3.keep_local, s3.keep_remote) == (1, 3)
    assert cfg.trainer.resume_run_name is None


def test_upstream_per_env_blocks_are_present(cfg):
    gym = cfg.environment.skyrl_gym
    assert gym.text2sql.db_path == "/home/ray/default/sql_data"
    assert gym.search.topk == 3
    assert gym.llm_as_a_judge.model == "gpt-4o-mini"


def _all_fields(cls):
    for f in dataclasses.fields(cls):
        yield cls, f
        if dataclasses.is_dataclass(f.type):
            yield from _all_fields(f.type)


def test_every_key_has_a_one_line_help_text():
    for cls, f in _all_fields(SkyRLConfig):
        text = help_of(f)
        assert text and "\n" not in text, f"{cls.__name__}.{f.name} needs a one-line help text"
