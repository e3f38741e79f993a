"""S3Store against a real S3-compatible server (moto in server mode, started by the `s3_server` fixture)."""

import hashlib
import json

import pytest

from skyrl_train.storage import IntegrityError, ManifestError, RetryPolicy, S3StorageError, S3Store, make_s3_client
from skyrl_train.testing.s3 import s3_client


def make_folder(root, files):
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return root


def keys(endpoint, bucket, prefix=""):
    pages = s3_client(endpoint).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted(obj["Key"] for page in pages for obj in page.get("Contents", []))


def read(endpoint, bucket, key):
    return s3_client(endpoint).get_object(Bucket=bucket, Key=key)["Body"].read()


@pytest.fixture
def store(s3_server, s3_bucket):
    return S3Store(s3_client(s3_server), s3_bucket, RetryPolicy(attempts=2, base_delay=0.01))


def test_upload_folder_puts_every_file_and_a_manifest_with_sizes_and_checksums(tmp_path, store, s3_server, s3_bucket):
    folder = make_folder(tmp_path / "step", {"policy/model.bin": b"weights", "trainer_state.pt": b"state!"})
    report = store.upload_folder(folder, "proj/run/global_step_1")
    assert keys(s3_server, s3_bucket) == [
        "proj/run/global_step_1/MANIFEST.json",
        "proj/run/global_step_1/policy/model.bin",
        "proj/run/global_step_1/trainer_state.pt",
    ]
    manifest = json.loads(read(s3_server, s3_bucket, "proj/run/global_step_1/MANIFEST.json"))
    assert manifest == {
        "format": 1,
        "total_bytes": 13,
        "files": [
            {"path": "policy/model.bin", "size": 7, "sha256": hashlib.sha256(b"weights").hexdigest()},
            {"path": "trainer_state.pt", "size": 6, "sha256": hashlib.sha256(b"state!").hexdigest()},
        ],
    }
    assert (report.url, report.files, report.bytes) == (f"s3://{s3_bucket}/proj/run/global_step_1/", 2, 13)


def test_download_folder_restores_the_files(tmp_path, store):
    store.upload_folder(make_folder(tmp_path / "up", {"a/b.txt": b"hello", "c.txt": b"world"}), "p/global_step_3")
    store.download_folder("p/global_step_3", tmp_path / "down")
    assert (tmp_path / "down" / "a" / "b.txt").read_bytes() == b"hello"
    assert (tmp_path / "down" / "c.txt").read_bytes() == b"world"


def test_download_detects_an_object_changed_after_upload(tmp_path, store, s3_server, s3_bucket):
    store.upload_folder(make_folder(tmp_path / "up", {"model.bin": b"12345"}), "p/global_step_1")
    s3_client(s3_server).put_object(Bucket=s3_bucket, Key="p/global_step_1/model.bin", Body=b"54321")
    with pytest.raises(IntegrityError, match=r"p/global_step_1/model.bin does not match the sha256 in its manifest"):
        store.download_folder("p/global_step_1", tmp_path / "down")


def test_download_detects_a_missing_object(tmp_path, store, s3_server, s3_bucket):
    store.upload_folder(make_folder(tmp_path / "up", {"model.bin": b"12345"}), "p/global_step_1")
    s3_client(s3_server).delete_object(Bucket=s3_bucket, Key="p/global_step_1/model.bin")
    with pytest.raises(IntegrityError, match=r"p/global_step_1/model.bin is listed in its manifest but missing"):
        store.download_folder("p/global_step_1", tmp_path / "down")


def test_a_folder_without_manifest_is_not_downloadable(store, s3_server, s3_bucket, tmp_path):
    s3_client(s3_server).put_object(Bucket=s3_bucket, Key="p/global_step_2/model.bin", Body=b"half")
    with pytest.raises(IntegrityError, match=r"p/global_step_2/ has no MANIFEST.json: it is not a complete upload"):
        store.download_folder("p/global_step_2", tmp_path / "down")


def test_reupload_replaces_the_manifest_and_removes_stale_objects(tmp_path, store, s3_server, s3_bucket):
    store.upload_folder(make_folder(tmp_path / "v1", {"old.bin": b"1", "same.bin": b"1"}), "p/global_step_1")
    store.upload_folder(make_folder(tmp_path / "v2", {"same.bin": b"22"}), "p/global_step_1")
    assert keys(s3_server, s3_bucket) == ["p/global_step_1/MANIFEST.json", "p/global_step_1/same.bin"]
    assert [f.size for f in store.read_manifest("p/global_step_1").files] == [2]


@pytest.mark.parametrize("target", ["secret.txt", "outside"])  # a file, a folder
def test_a_symlink_out_of_the_folder_is_refused_before_the_bucket_changes(
    tmp_path, store, s3_server, s3_bucket, target
):
    (tmp_path / "secret.txt").write_bytes(b"credentials")
    (tmp_path / "outside").mkdir()
    folder = make_folder(tmp_path / "step", {"model.bin": b"v1"})
    store.upload_folder(folder, "p/global_step_1")
    (folder / "model.bin").write_bytes(b"v2")
    link = folder / "policy" / "link"
    link.parent.mkdir()
    link.symlink_to(tmp_path / target)
    with pytest.raises(ManifestError, match=rf"{link} is a symbolic link to {tmp_path / target}, outside the folder"):
        store.upload_folder(folder, "p/global_step_1")
    with pytest.raises(ManifestError, match=rf"{link} is a symbolic link"):
        store.upload_files(folder, "p/global_step_1")
    assert keys(s3_server, s3_bucket) == ["p/global_step_1/MANIFEST.json", "p/global_step_1/model.bin"]
    assert read(s3_server, s3_bucket, "p/global_step_1/model.bin") == b"v1"


def test_a_symlink_inside_the_folder_uploads_the_file_it_points_to(tmp_path, store, s3_server, s3_bucket):
    folder = make_folder(tmp_path / "step", {"a/model.bin": b"weights"})
    (folder / "b").mkdir()
    (folder / "b" / "model.bin").symlink_to(folder / "a" / "model.bin")
    store.upload_folder(folder, "p/global_step_1")
    assert read(s3_server, s3_bucket, "p/global_step_1/b/model.bin") == b"weights"


def test_list_folders_tells_complete_from_incomplete(tmp_path, store, s3_server, s3_bucket):
    store.upload_folder(make_folder(tmp_path / "a", {"x": b"1"}), "p/run/global_step_1")
    s3_client(s3_server).put_object(Bucket=s3_bucket, Key="p/run/global_step_2/x", Body=b"partial")
    s3_client(s3_server).put_object(Bucket=s3_bucket, Key="p/run2/global_step_9/x", Body=b"other run")
    assert store.list_folders("p/run") == {"global_step_1": True, "global_step_2": False}


def test_delete_folder_removes_every_object(tmp_path, store, s3_server, s3_bucket):
    store.upload_folder(make_folder(tmp_path / "a", {"x": b"1", "y/z": b"2"}), "p/global_step_1")
    store.upload_folder(make_folder(tmp_path / "b", {"x": b"1"}), "p/global_step_2")
    assert store.delete_folder("p/global_step_1") == 3
    assert keys(s3_server, s3_bucket) == ["p/global_step_2/MANIFEST.json", "p/global_step_2/x"]


def test_a_missing_bucket_fails_at_once_naming_it(tmp_path, s3_server, s3_bucket):
    sleeps = []
    store = S3Store(s3_client(s3_server), "no-such-bucket", RetryPolicy(attempts=5), sleep=sleeps.append)
    with pytest.raises(S3StorageError, match=r"listing s3://no-such-bucket/p/global_step_1/ failed: .*NoSuchBucket"):
        store.upload_folder(make_folder(tmp_path / "a", {"x": b"1"}), "p/global_step_1")
    assert sleeps == []


def test_an_unreachable_endpoint_is_retried_with_backoff_then_reported(tmp_path, s3_bucket, unused_port):
    sleeps = []
    client = make_s3_client(f"http://127.0.0.1:{unused_port}", max_attempts=1)
    store = S3Store(client, s3_bucket, RetryPolicy(attempts=3, base_delay=0.5, max_delay=0.75), sleep=sleeps.append)
    with pytest.raises(S3StorageError, match=rf"listing s3://{s3_bucket}/p/global_step_1/ failed: Could not connect"):
        store.upload_folder(make_folder(tmp_path / "a", {"x": b"1"}), "p/global_step_1")
    assert sleeps == [0.5, 0.75]


@pytest.fixture
def unused_port():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_upload_files_puts_the_files_and_no_manifest(tmp_path, store, s3_server, s3_bucket):
    manifest = store.upload_files(make_folder(tmp_path / "shards", {"m/__1_0.distcp": b"shard1"}), "p/global_step_1/x")
    assert keys(s3_server, s3_bucket) == ["p/global_step_1/x/m/__1_0.distcp"]
    assert [(e.path, e.size, e.sha256) for e in manifest.files] == [
        ("m/__1_0.distcp", 6, hashlib.sha256(b"shard1").hexdigest())
    ]


def test_upload_folder_lists_files_others_uploaded_keeps_them_and_does_not_upload_them_again(
    tmp_path, store, s3_server, s3_bucket
):
    theirs = store.upload_files(make_folder(tmp_path / "node_b", {"policy/__1_0.distcp": b"B"}), "p/global_step_1")
    folder = make_folder(tmp_path / "driver", {"state.pt": b"S", "policy/__1_0.distcp": b"not this one"})
    store.upload_folder(folder, "p/global_step_1", uploaded=theirs.files)
    manifest = json.loads(read(s3_server, s3_bucket, "p/global_step_1/MANIFEST.json"))
    assert [(f["path"], f["size"]) for f in manifest["files"]] == [("policy/__1_0.distcp", 1), ("state.pt", 1)]
    assert read(s3_server, s3_bucket, "p/global_step_1/policy/__1_0.distcp") == b"B"
    store.download_folder("p/global_step_1", tmp_path / "down")
    assert (tmp_path / "down" / "policy" / "__1_0.distcp").read_bytes() == b"B"


def test_upload_folder_refuses_a_listed_file_that_is_not_in_the_bucket(tmp_path, store, s3_server, s3_bucket):
    theirs = store.upload_files(make_folder(tmp_path / "node_b", {"policy/__1_0.distcp": b"B"}), "p/global_step_1")
    s3_client(s3_server).delete_object(Bucket=s3_bucket, Key="p/global_step_1/policy/__1_0.distcp")
    with pytest.raises(S3StorageError, match="policy/__1_0.distcp has size None, expected 1"):
        store.upload_folder(
            make_folder(tmp_path / "driver", {"state.pt": b"S"}), "p/global_step_1", uploaded=theirs.files
        )
    assert "p/global_step_1/MANIFEST.json" not in keys(s3_server, s3_bucket)
