"""Eval dumps are uploaded in the background to evals/{run}/global_step_N/, with secret env values scrubbed."""

import json

from skyrl_train.evaluate import dump_eval_results
from skyrl_train.storage import BackgroundUploader, RetryPolicy, S3Store, queue_eval_dump_upload
from skyrl_train.testing.s3 import s3_client
from skyrl_train.trainer_utils import Rollouts

FAKE_OPENAI_KEY = "sk-proj-FAKE0123456789abcdefXYZ"  # pragma: allowlist secret


def upload(store, folder, prefix):
    uploader = BackgroundUploader()
    queue_eval_dump_upload(uploader, store, folder, prefix)
    assert uploader.close(timeout=30) == []


def keys(endpoint, bucket):
    return sorted(obj["Key"] for obj in s3_client(endpoint).list_objects_v2(Bucket=bucket).get("Contents", []))


def body(endpoint, bucket, key):
    return s3_client(endpoint).get_object(Bucket=bucket, Key=key)["Body"].read().decode()


def write_dump(folder, rows_by_source):
    folder.mkdir(parents=True)
    for source, rows in rows_by_source.items():
        (folder / f"{source}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (folder / "aggregated_results.jsonl").write_text(json.dumps({"eval/all/pass_at_1": 0.5}) + "\n")
    return folder


def test_a_dump_folder_lands_under_evals_run_step(tmp_path, s3_server, s3_bucket):
    folder = write_dump(tmp_path / "global_step_3_evals", {"gsm8k": [{"score": 1}], "mcp_tools": [{"score": 0}]})
    upload(S3Store(s3_client(s3_server), s3_bucket), folder, "evals/run7/global_step_3")
    assert keys(s3_server, s3_bucket) == [
        "evals/run7/global_step_3/MANIFEST.json",
        "evals/run7/global_step_3/aggregated_results.jsonl",
        "evals/run7/global_step_3/gsm8k.jsonl",
        "evals/run7/global_step_3/mcp_tools.jsonl",
    ]
    assert body(s3_server, s3_bucket, "evals/run7/global_step_3/gsm8k.jsonl") == '{"score": 1}\n'


def test_a_secret_env_value_in_a_local_dump_is_not_uploaded(tmp_path, s3_server, s3_bucket, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_OPENAI_KEY)
    folder = write_dump(tmp_path / "dump", {"gsm8k": [{"input_prompt": f"use key {FAKE_OPENAI_KEY} please"}]})
    upload(S3Store(s3_client(s3_server), s3_bucket), folder, "evals/run7/global_step_1")
    assert body(s3_server, s3_bucket, "evals/run7/global_step_1/gsm8k.jsonl") == (
        '{"input_prompt": "use key <redacted> please"}\n'
    )


def test_a_secret_in_an_eval_prompt_never_reaches_s3(tmp_path, s3_server, s3_bucket, monkeypatch, tiny_tokenizer):
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_OPENAI_KEY)
    prompt_ids = tiny_tokenizer.encode(f"My key is {FAKE_OPENAI_KEY}. Call the tool.")
    output = {
        "prompt_token_ids": [prompt_ids],
        "response_ids": [tiny_tokenizer.encode("ok")],
        "rewards": [1.0],
        "stop_reasons": ["stop"],
    }
    folder = tmp_path / "global_step_2_evals"
    dump_eval_results(folder, Rollouts(output, ["0"], ["gsm8k"], [{"data_source": "math"}]), tiny_tokenizer, {"m": 1.0})
    upload(S3Store(s3_client(s3_server), s3_bucket), folder, "evals/run7/global_step_2")
    for key in keys(s3_server, s3_bucket):
        assert FAKE_OPENAI_KEY not in body(s3_server, s3_bucket, key), key
    assert "<redacted>" in body(s3_server, s3_bucket, "evals/run7/global_step_2/math.jsonl")


def test_a_failed_upload_is_reported_and_the_local_dump_kept(tmp_path, s3_server, s3_bucket, caplog):
    folder = write_dump(tmp_path / "dump", {"gsm8k": [{"score": 1}]})
    store = S3Store(s3_client(s3_server), "missing-bucket", RetryPolicy(attempts=1))
    upload(store, folder, "evals/run7/global_step_1")
    assert f"eval dump {folder} NOT uploaded to s3://missing-bucket/evals/run7/global_step_1" in caplog.text
    assert "NoSuchBucket" in caplog.text and "(local copy kept)" in caplog.text
    assert (folder / "gsm8k.jsonl").read_text() == '{"score": 1}\n'
