"""Dumps in S3 (`s3://<bucket>/evals/<run>/global_step_N/`), read from a real S3-compatible server (moto)."""

from __future__ import annotations

import json

import pytest

from skyrl_integrations.analysis import DumpError, load_eval_dumps
from skyrl_integrations.analysis.cli import main
from skyrl_train.testing.s3 import s3_bucket, s3_client, s3_server  # noqa: F401


@pytest.fixture
def run_in_s3(s3_server, s3_bucket, make_row):  # noqa: F811
    """evals/run1 with steps 0 and 40 (one env_a trajectory each) and their aggregated_results.jsonl."""
    client = s3_client(s3_server)
    for step, score in (("global_step_0", 0.0), ("global_step_40", 1.0)):
        body = json.dumps(make_row(score)) + "\n"
        client.put_object(Bucket=s3_bucket, Key=f"evals/run1/{step}/env_a.jsonl", Body=body.encode())
        client.put_object(Bucket=s3_bucket, Key=f"evals/run1/{step}/aggregated_results.jsonl", Body=b"{}\n")
    client.put_object(Bucket=s3_bucket, Key="evals/run10/global_step_9/env_a.jsonl", Body=b"not a dump\n")
    return f"s3://{s3_bucket}/evals/run1"


def test_steps_are_read_from_the_s3_layout(run_in_s3, s3_server):  # noqa: F811
    steps = load_eval_dumps(run_in_s3, endpoint_url=s3_server)
    assert {label: [t.score for t in trajectories] for label, trajectories in steps.items()} == {
        "0": [0.0],
        "40": [1.0],
    }


def test_the_endpoint_defaults_to_aws_endpoint_url(run_in_s3):
    # s3_bucket put the server's URL in AWS_ENDPOINT_URL
    assert list(load_eval_dumps(run_in_s3)) == ["0", "40"]


def test_the_cli_compares_steps_in_s3(run_in_s3, s3_server, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "summary.json"
    assert main([run_in_s3, "--endpoint-url", s3_server, "--step", "0", "--step", "40", "--json", str(out)]) == 0
    comparison = json.loads(out.read_text())["comparison"]
    assert comparison["groups"]["overall"]["any_success"] == {"from": 0.0, "to": 1.0, "delta": 1.0}


def test_a_missing_bucket_is_an_error_naming_it(s3_server, s3_bucket):  # noqa: F811
    with pytest.raises(DumpError, match="s3://no-such-bucket-h6/evals/run1/.*NoSuchBucket"):
        load_eval_dumps("s3://no-such-bucket-h6/evals/run1", endpoint_url=s3_server)
