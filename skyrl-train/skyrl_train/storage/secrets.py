"""Scrub secret *values* from bytes leaving the machine (eval dumps uploaded to S3).

`skyrl_train.utils.redact.redact_secrets` hides config entries by their names; a dump row has no such names, but
a prompt or tool output can contain a credential verbatim (an env var echoed by a tool, a key pasted into a
task). Every environment variable whose name looks secret (`is_secret_name`) and whose value has at least
`MIN_SECRET_LENGTH` characters is replaced by ``<redacted>``, in its raw and its JSON-escaped spelling.
Shorter values are not credible credentials and would blank unrelated text (``testing``, ``1``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from skyrl_train.utils.redact import REDACTED, is_secret_name

MIN_SECRET_LENGTH = 8


def secret_env_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of the env vars with secret-looking names (at least `MIN_SECRET_LENGTH` long), longest first."""
    environ = os.environ if environ is None else environ
    values = {value for name, value in environ.items() if len(value) >= MIN_SECRET_LENGTH and is_secret_name(name)}
    return sorted(values, key=len, reverse=True)


def scrub_secret_values(data: bytes, secrets: list[str]) -> bytes:
    """`data` with every raw or JSON-escaped occurrence of each of `secrets` replaced by ``<redacted>``."""
    for secret in secrets:
        for spelling in dict.fromkeys((secret, json.dumps(secret)[1:-1])):
            data = data.replace(spelling.encode(), REDACTED.encode())
    return data
