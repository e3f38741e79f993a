"""A real S3-compatible server for tests: moto's server mode in its own process, spoken to over HTTP by boto3.

    from skyrl_train.testing.s3 import s3_bucket, s3_server  # noqa: F401

- `s3_server` (session): starts ``python -m moto.server`` on a free localhost port; yields its endpoint URL.
  A separate process, so it outlives a test's child processes, including ones killed with SIGKILL.
- `s3_bucket`: puts fake credentials and the endpoint in the environment (`s3_env`, through monkeypatch, so
  boto3's standard chain finds them and no client can reach AWS), creates a fresh bucket and yields its name.

Child processes get the same environment with ``{**os.environ, **s3_env(endpoint_url)}`` (`s3_bucket` already
set it in `os.environ`). `s3_client(endpoint_url)` is a plain boto3 client for assertions; `s3_keys` and
`complete_steps` list what a bucket holds.
"""

from __future__ import annotations

import functools
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from skyrl_train.storage import make_s3_client

REGION = "us-east-1"
FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",  # pragma: allowlist secret
    "AWS_SECRET_ACCESS_KEY": "testing",  # pragma: allowlist secret
}


def s3_env(endpoint_url: str) -> dict[str, str]:
    """Environment for boto3 to use the test server: fake credentials, region, endpoint, no user config files."""
    return {
        **FAKE_CREDENTIALS,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ENDPOINT_URL": endpoint_url,
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }


@functools.cache
def s3_client(endpoint_url: str):
    """A boto3 client on the test server, built once per endpoint (the environment must hold `s3_env`)."""
    return make_s3_client(endpoint_url, REGION)


def s3_keys(endpoint_url: str, bucket: str, prefix: str = "") -> list[str]:
    """Every key below ``prefix`` in ``bucket``, sorted."""
    pages = s3_client(endpoint_url).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted(obj["Key"] for page in pages for obj in page.get("Contents", []))


def complete_steps(endpoint_url: str, bucket: str, run_prefix: str) -> list[int]:
    """The checkpoint steps under ``run_prefix`` (e.g. ``proj/run1``) that have a manifest, i.e. are complete."""
    return sorted(
        int(key.split("/")[-2].removeprefix("global_step_"))
        for key in s3_keys(endpoint_url, bucket, f"{run_prefix}/")
        if key.endswith("/MANIFEST.json") and key.count("/") == run_prefix.count("/") + 2
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def moto_server(log_file: Path, startup_timeout: float = 30.0) -> Iterator[str]:
    """Run moto's S3-compatible server until the block exits; yields its endpoint URL."""
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    with open(log_file, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log
        )
    try:
        deadline = time.monotonic() + startup_timeout
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
                break
            except (urllib.error.URLError, OSError):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto server did not start on {endpoint}; see {log_file}") from None
                time.sleep(0.1)
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory) -> Iterator[str]:
    """Session fixture: endpoint URL of a moto S3 server process."""
    with moto_server(tmp_path_factory.mktemp("moto") / "server.log") as endpoint:
        yield endpoint


@pytest.fixture
def s3_bucket(s3_server: str, monkeypatch) -> str:
    """A new empty bucket on `s3_server`, with `s3_env` set in `os.environ` for the test."""
    for name, value in s3_env(s3_server).items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "S3_CHECKPOINT_BUCKET", "S3_TRAJECTORY_BUCKET", "RESUME_RUN_NAME"):
        monkeypatch.delenv(name, raising=False)
    bucket = f"test-{uuid.uuid4().hex[:12]}"
    s3_client(s3_server).create_bucket(Bucket=bucket)
    return bucket
