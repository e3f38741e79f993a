"""Keep secrets out of everything the trackers store (config, metrics).

A value is secret when its *name* looks like a secret's: ``WANDB_API_KEY``, ``aws_secret_access_key``,
``hf_token``, ``db.password``, ``apiKey``, ``SLACK_WEBHOOK_URL``. Names are split into lower-case words (on
``_ - . /``, spaces and camelCase), then:

- any word in `_SECRET_WORDS` marks a secret;
- ``token`` marks a secret unless a neighbouring word shows a tokenizer or length setting (``pad_token``,
  ``max_token``, ``token_ids``; ``max_tokens`` never matches, ``tokens`` being another word), an importance
  sampling statistic (``tis_token_clip_high_ratio``, ``outlier_token_is_threshold_low``) or the SFT metric
  ``token_accuracy``;
- ``key`` marks a secret when alone or after a word such as ``api``/``access``/``private`` (so ``env_class_key``
  and ``prompt_key``, which are config column names, stay visible).

Some blocks hold a secret in every value whatever its name (`SECRET_VALUE_BLOCKS`): an MCP server's ``env`` (a
``SERVICE_URL`` may carry a password) and HTTP ``headers``. `is_secret_path` applies both rules to an entry's path of
keys from the root of its tree.

The rule leans towards redacting: a false positive only hides one config value in the tracker, a false
negative publishes a credential. Strings of the form ``NAME=value`` (env-var lists) are redacted by ``NAME``.

This module is the one place that decides what is secret, for everything that leaves the process: the changed-config
log, the config and metrics every tracker stores, the config saved in checkpoints, eval dumps (and their S3 copies).
Text with no names to go by (a dump row: prompts, tool outputs) has the secret *values* themselves replaced
(`secret_values`, `scrub_secret_values`): those of env vars with secret names and of the config's secret entries.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

REDACTED = "<redacted>"

SECRET_VALUE_BLOCKS = frozenset({"env", "headers"})
"""Keys whose mapping holds a secret in every value, whatever the value's name."""

MIN_SECRET_LENGTH = 8
"""Shorter secret values are not scrubbed from text (`secret_values`): they are not credible credentials and would
blank unrelated words (``testing``, ``1``)."""

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
    | {"accuracy"}  # the SFT metric token_accuracy
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


def is_secret_path(path: Sequence[str]) -> bool:
    """Whether the entry at `path` (its keys from the root, e.g. ``("environment", ..., "env", "SERVICE_URL")``) holds
    a secret: a key on the path has a secret's name, or the entry is inside a `SECRET_VALUE_BLOCKS` mapping."""
    return any(is_secret_name(key) for key in path) or any(key.lower() in SECRET_VALUE_BLOCKS for key in path[:-1])


def redact_secrets(value: Any, path: Sequence[str] = ()) -> Any:
    """A copy of ``value`` (nested dicts/lists/tuples) with every secret entry (`is_secret_path`) replaced by
    ``"<redacted>"``; `path` is where ``value`` sits in its tree (e.g. a changed key's dotted path, split).

    Unset values (``None``, ``""``) are kept, so the logged config still shows that a secret was not configured.
    """
    if is_secret_path(path) and not (value is None or (isinstance(value, str) and not value)):
        return REDACTED
    if isinstance(value, Mapping):
        return {k: redact_secrets(v, (*path, str(k))) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_secrets(v, path) for v in value]
    if isinstance(value, tuple):
        return tuple(redact_secrets(v, path) for v in value)
    if isinstance(value, str):
        match = _ENV_ASSIGNMENT.match(value)
        if match and match.group(2) and is_secret_name(match.group(1)):
            return f"{match.group(1)}={REDACTED}"
    return value


def secret_values(tree: Any = None, environ: Mapping[str, str] | None = None) -> list[str]:
    """The secret values to scrub from text, longest first: the string values at secret entries of `tree` (e.g. the
    run's config as plain dicts) and the values of env vars with secret names (`environ`, default ``os.environ``);
    values shorter than `MIN_SECRET_LENGTH` are left out."""
    environ = os.environ if environ is None else environ
    found = {value for name, value in environ.items() if is_secret_name(name)}
    found.update(_secret_strings(tree, ()))
    return sorted((v for v in found if len(v) >= MIN_SECRET_LENGTH), key=len, reverse=True)


def scrub_secret_values(data: bytes, secrets: list[str]) -> bytes:
    """`data` with every raw or JSON-escaped occurrence of each of `secrets` replaced by ``<redacted>``."""
    for secret in secrets:
        for spelling in dict.fromkeys((secret, json.dumps(secret)[1:-1])):
            data = data.replace(spelling.encode(), REDACTED.encode())
    return data


def _secret_strings(value: Any, path: tuple[str, ...]) -> list[str]:
    if isinstance(value, Mapping):
        return [s for k, v in value.items() for s in _secret_strings(v, (*path, str(k)))]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _secret_strings(v, path)]
    if not isinstance(value, str):
        return []
    if is_secret_path(path):
        return [value]
    match = _ENV_ASSIGNMENT.match(value)
    return [match.group(2)] if match and is_secret_name(match.group(1)) else []
