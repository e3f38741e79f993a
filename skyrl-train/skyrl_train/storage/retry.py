"""Retries with exponential backoff for S3 calls that fail transiently.

botocore already retries each HTTP request a few times within seconds (`standard` mode); this outer loop
retries a whole operation (one file upload, one download) over a longer window, so an endpoint that is
unreachable for a minute does not lose a checkpoint. Permanent errors (a missing bucket, access denied, a
local file that cannot be read) fail at once: retrying them only delays the report.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from boto3.exceptions import S3UploadFailedError
from botocore.exceptions import ClientError, ConnectionError, HTTPClientError, NoCredentialsError

logger = logging.getLogger(__name__)

T = TypeVar("T")

_TRANSIENT_CODES = frozenset(
    {
        "RequestTimeout",
        "RequestTimeTooSkewed",
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "InternalError",
        "ServiceUnavailable",
    }
)


@dataclass(frozen=True)
class RetryPolicy:
    """`attempts` tries in all; the wait before try k+1 is `base_delay * 2**(k-1)`, capped at `max_delay`."""

    attempts: int = 5
    base_delay: float = 1.0
    max_delay: float = 60.0

    def __post_init__(self):
        if self.attempts < 1:
            raise ValueError(f"trainer.s3.upload_attempts must be >= 1, got {self.attempts}")

    def delay(self, failed_attempts: int) -> float:
        return min(self.base_delay * 2 ** (failed_attempts - 1), self.max_delay)


def is_transient(exc: BaseException) -> bool:
    """Whether retrying `exc` can help: connection problems, timeouts, throttling and 5xx answers."""
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        return error.get("Code") in _TRANSIENT_CODES or status >= 500 or status in (408, 429)
    if isinstance(exc, S3UploadFailedError):
        # boto3's transfer manager wraps the ClientError in a message; the cause keeps the original.
        cause = exc.__cause__ or exc.__context__
        return is_transient(cause) if cause is not None else True
    return isinstance(exc, ConnectionError | HTTPClientError) and not isinstance(exc, NoCredentialsError)


def call_with_retries(
    fn: Callable[[], T], what: str, policy: RetryPolicy, sleep: Callable[[float], None] = time.sleep
) -> T:
    """`fn()`, retried on transient errors per `policy`; the last error is raised with `what` in the log."""
    for attempt in range(1, policy.attempts + 1):
        try:
            return fn()
        except Exception as exc:
            if attempt == policy.attempts or not is_transient(exc):
                raise
            wait = policy.delay(attempt)
            logger.warning(
                "%s failed (attempt %d/%d: %s); retrying in %.1f s", what, attempt, policy.attempts, exc, wait
            )
            sleep(wait)
    raise AssertionError("unreachable")
