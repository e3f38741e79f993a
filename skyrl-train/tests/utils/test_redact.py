"""Secret redaction: by key name, at any depth, env-var style names included; every value of an `env` or `headers`
block; and secret values scrubbed from text."""

import json

import pytest

from skyrl_train.utils.redact import (
    is_secret_name,
    is_secret_path,
    redact_secrets,
    scrub_secret_values,
    secret_values,
)

FAKE_KEY = "sk-test-0123456789abcdef"  # pragma: allowlist secret


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
        "sft/token_accuracy",
        "eval/sft/token_accuracy",
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


def test_every_value_of_an_env_or_headers_block_is_secret_whatever_its_name():
    server = {"command": "srv", "env": {"SERVICE_URL": "https://u:p@host", "EMPTY": ""}, "headers": {"X-Org": "o1"}}
    assert redact_secrets({"servers": {"demo": server}}) == {
        "servers": {
            "demo": {
                "command": "srv",
                "env": {"SERVICE_URL": "<redacted>", "EMPTY": ""},
                "headers": {"X-Org": "<redacted>"},
            }
        }
    }
    assert is_secret_path(("environment", "skyrl_gym", "mcp_tool", "servers", "demo", "env", "SERVICE_URL"))
    assert not is_secret_path(("environment", "skyrl_gym", "mcp_tool", "servers", "demo", "env"))
    assert not is_secret_path(("environment", "env_class"))


def test_a_value_is_redacted_by_the_path_it_sits_at():
    assert redact_secrets("abc", ("generator", "user", "api_key")) == "<redacted>"
    assert redact_secrets("abc", ("servers", "demo", "env", "URL")) == "<redacted>"
    assert redact_secrets("abc", ("generator", "model")) == "abc"


def test_secret_values_come_from_secret_env_vars_and_secret_config_entries_longest_first():
    environ = {"OPENAI_API_KEY": FAKE_KEY, "HF_TOKEN": "hf_abcdefgh", "HOME": "/home/someone/long/path"}
    config = {
        "servers": {"demo": {"env": {"URL": "https://user:pw@h"}}},  # pragma: allowlist secret
        "user": {"api_key": "key-12345678"},  # pragma: allowlist secret
    }
    expected = [FAKE_KEY, "https://user:pw@h", "key-12345678", "hf_abcdefgh"]  # pragma: allowlist secret
    assert secret_values(config, environ) == expected


def test_short_values_are_not_treated_as_secrets():
    environ = {"AWS_SECRET_ACCESS_KEY": "testing", "DB_PASSWORD": "1"}  # pragma: allowlist secret
    assert secret_values({"api_key": "short"}, environ) == []  # pragma: allowlist secret


def test_raw_and_json_escaped_spellings_are_replaced():
    quoted = 'pa"ss\\word-1234'  # pragma: allowlist secret
    data = f"raw {FAKE_KEY}\n".encode() + json.dumps({"b": quoted}).encode()
    assert scrub_secret_values(data, [FAKE_KEY, quoted]) == b'raw <redacted>\n{"b": "<redacted>"}'
