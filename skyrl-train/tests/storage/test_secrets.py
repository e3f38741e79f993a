"""Secret env values are scrubbed from uploaded bytes."""

import json

from skyrl_train.storage import scrub_secret_values, secret_env_values

FAKE_KEY = "sk-test-0123456789abcdef"  # pragma: allowlist secret


def test_secret_named_env_values_are_collected_longest_first():
    environ = {"OPENAI_API_KEY": FAKE_KEY, "HF_TOKEN": "hf_abcdefgh", "HOME": "/home/someone/long/path"}
    assert secret_env_values(environ) == [FAKE_KEY, "hf_abcdefgh"]


def test_short_values_are_not_treated_as_secrets():
    assert secret_env_values({"AWS_SECRET_ACCESS_KEY": "testing", "DB_PASSWORD": "1"}) == []  # pragma: allowlist secret


def test_raw_and_json_escaped_spellings_are_replaced():
    quoted = 'pa"ss\\word-1234'  # pragma: allowlist secret
    data = f"raw {FAKE_KEY}\n".encode() + json.dumps({"b": quoted}).encode()
    assert scrub_secret_values(data, [FAKE_KEY, quoted]) == b'raw <redacted>\n{"b": "<redacted>"}'
