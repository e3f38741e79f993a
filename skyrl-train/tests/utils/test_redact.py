"""Secret redaction: by key name, at any depth, env-var style names included."""

import pytest

from skyrl_train.utils.redact import is_secret_name, redact_secrets


@pytest.mark.parametrize(
    "name",
    [
        "AWS_SECRET_ACCESS_KEY",
        "AWS_ACCESS_KEY_ID",
        "AWS_SESSION_TOKEN",
        "WANDB_API_KEY",
        "api_key",
        "apiKey",
        "APIKEY",
        "HF_TOKEN",
        "github_token",
        "db.password",
        "SLACK_WEBHOOK_URL",
        "private_key",
        "key",
        "Authorization",
    ],
)
def test_secret_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "max_tokens",
        "pad_token",
        "eos_token",
        "tokenizer",
        "token_ids",
        "env_class_key",
        "prompt_key",
        "lr",
        "monkey",
        "policy/loss_metrics/tis_token_clip_high_ratio",
        "trainer.algorithm.off_policy_correction.token_tis_ratio_clip_high",
        "trainer.algorithm.off_policy_correction.outlier_token_is_threshold_low",
    ],
)
def test_ordinary_names(name):
    assert not is_secret_name(name)


def test_nested_dicts_and_lists_are_redacted_and_the_input_is_untouched():
    config = {
        "trainer": {"policy": {"lr": 1e-6}, "s3": {"aws_secret_access_key": "abc", "bucket": "b"}},
        "generator": {
            "remote": [{"url": "http://x", "api_key": "sk-1"}],  # pragma: allowlist secret
            "sampling_params": {"max_tokens": 64},
        },
    }
    assert redact_secrets(config) == {
        "trainer": {"policy": {"lr": 1e-6}, "s3": {"aws_secret_access_key": "<redacted>", "bucket": "b"}},
        "generator": {"remote": [{"url": "http://x", "api_key": "<redacted>"}], "sampling_params": {"max_tokens": 64}},
    }
    assert config["trainer"]["s3"]["aws_secret_access_key"] == "abc"


def test_a_whole_block_under_a_secret_name_is_redacted():
    assert redact_secrets({"credentials": {"user": "u", "pass": "p"}}) == {"credentials": "<redacted>"}


def test_env_var_assignments_in_strings_are_redacted_by_name():
    env = ["WANDB_API_KEY=abc123", "HF_HOME=/cache", "PATH=/bin"]
    assert redact_secrets({"env": env}) == {"env": ["WANDB_API_KEY=<redacted>", "HF_HOME=/cache", "PATH=/bin"]}


def test_unset_secrets_stay_visible_as_unset():
    assert redact_secrets({"api_key": None, "hf_token": ""}) == {"api_key": None, "hf_token": ""}
