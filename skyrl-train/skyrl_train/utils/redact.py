"""Keep secrets out of everything the trackers store (config, metrics).

A value is secret when its *name* looks like a secret's: ``WANDB_API_KEY``, ``aws_secret_access_key``,
``hf_token``, ``db.password``, ``apiKey``, ``SLACK_WEBHOOK_URL``. Names are split into lower-case words (on
``_ - . /``, spaces and camelCase), then:

- any word in `_SECRET_WORDS` marks a secret;
- ``token`` marks a secret unless a neighbouring word shows a tokenizer or length setting (``pad_token``,
  ``max_token``, ``token_ids``; ``max_tokens`` never matches, ``tokens`` being another word) or an importance
  sampling statistic (``tis_token_clip_high_ratio``, ``outlier_token_is_threshold_low``);
- ``key`` marks a secret when alone or after a word such as ``api``/``access``/``private`` (so ``env_class_key``
  and ``prompt_key``, which are config column names, stay visible).

The rule leans towards redacting: a false positive only hides one config value in the tracker, a false
negative publishes a credential. Strings of the form ``NAME=value`` (env-var lists) are redacted by ``NAME``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

REDACTED = "<redacted>"

_SECRET_WORDS = frozenset(
    {
        "secret",
        "secrets",
        "password",
        "passwd",
        "pwd",
        "passphrase",
        "credential",
        "credentials",
        "apikey",
        "privatekey",
        "webhook",
        "auth",
        "authorization",
        "cookie",
    }
)
# Words next to "token" that make it a tokenizer/length setting rather than a credential.
_NOT_SECRET_TOKEN_NEIGHBOURS = frozenset(
    {"pad", "eos", "bos", "unk", "sep", "cls", "mask", "stop", "special", "max", "min", "num", "avg", "id", "ids"}
    | {"tis", "outlier"}  # off-policy correction keys and metrics (trainer.algorithm.off_policy_correction)
)
# Words before "key" that make it a credential.
_SECRET_KEY_QUALIFIERS = frozenset(
    {"api", "access", "secret", "private", "auth", "signing", "encryption", "ssh", "license", "master", "session"}
)

_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
_ENV_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)


def _words(name: str) -> list[str]:
    return [w.lower() for w in _WORD_SPLIT.split(name) if w]


def is_secret_name(name: str) -> bool:
    """Whether a config key, env var or metric name looks like it holds a secret (rules in the module doc)."""
    words = _words(name)
    for i, word in enumerate(words):
        if word in _SECRET_WORDS:
            return True
        neighbours = set(words[max(i - 1, 0) : i] + words[i + 1 : i + 2])
        if word == "token" and not neighbours & _NOT_SECRET_TOKEN_NEIGHBOURS:
            return True
        if word == "key" and (len(words) == 1 or (i > 0 and words[i - 1] in _SECRET_KEY_QUALIFIERS)):
            return True
    return False


def redact_secrets(value: Any) -> Any:
    """A copy of ``value`` (nested dicts/lists/tuples) with every secret-named entry replaced by ``"<redacted>"``.

    Unset values (``None``, ``""``) are kept, so the logged config still shows that a secret was not configured.
    """
    if isinstance(value, Mapping):
        return {k: _redact_entry(str(k), v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_secrets(v) for v in value]
    if isinstance(value, tuple):
        return tuple(redact_secrets(v) for v in value)
    if isinstance(value, str):
        match = _ENV_ASSIGNMENT.match(value)
        if match and match.group(2) and is_secret_name(match.group(1)):
            return f"{match.group(1)}={REDACTED}"
    return value


def _redact_entry(name: str, value: Any) -> Any:
    unset = value is None or (isinstance(value, str) and not value)
    if is_secret_name(name) and not unset:
        return REDACTED
    return redact_secrets(value)
