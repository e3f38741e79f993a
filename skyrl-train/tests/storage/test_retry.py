"""call_with_retries: which errors are retried, and the backoff between tries."""

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

from skyrl_train.storage import RetryPolicy, call_with_retries, is_transient


def client_error(code, status):
    return ClientError({"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "Op")


def flaky(failures):
    calls = []

    def fn():
        calls.append(1)
        if len(calls) <= len(failures):
            raise failures[len(calls) - 1]
        return "done"

    return fn, calls


def test_backoff_doubles_up_to_the_cap():
    policy = RetryPolicy(attempts=6, base_delay=1.0, max_delay=5.0)
    assert [policy.delay(k) for k in range(1, 6)] == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_transient_errors_are_retried_until_success():
    sleeps = []
    fn, calls = flaky([client_error("SlowDown", 503), EndpointConnectionError(endpoint_url="http://x")])
    assert call_with_retries(fn, "op", RetryPolicy(attempts=3, base_delay=0.5), sleeps.append) == "done"
    assert (len(calls), sleeps) == (3, [0.5, 1.0])


def test_the_last_transient_error_is_raised_after_all_attempts():
    fn, calls = flaky([client_error("InternalError", 500)] * 5)
    with pytest.raises(ClientError, match="InternalError"):
        call_with_retries(fn, "op", RetryPolicy(attempts=2, base_delay=0.0), lambda _: None)
    assert len(calls) == 2


@pytest.mark.parametrize(
    "error",
    [client_error("AccessDenied", 403), client_error("NoSuchBucket", 404), NoCredentialsError(), OSError(28, "full")],
)
def test_permanent_errors_are_not_retried(error):
    assert not is_transient(error)
    fn, calls = flaky([error])
    with pytest.raises(type(error)):
        call_with_retries(fn, "op", RetryPolicy(attempts=5), lambda _: None)
    assert len(calls) == 1


def test_zero_attempts_is_rejected_naming_the_key():
    with pytest.raises(ValueError, match="trainer.s3.upload_attempts must be >= 1, got 0"):
        RetryPolicy(attempts=0)
